// A dropout rate outside [0, 1) is rejected.
// expect: static assertion failed: kiln::dropout<Rate>: Rate is the probability of dropping a value: 0 <= Rate < 1
// expect: dropout_rate_must_be_at_least_0_and_below_1<1.0e\+0>
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<4>, kiln::dense<3>, kiln::dropout<1.0>>;
#else
using net = kiln::model<kiln::input<4>, kiln::dense<3>, kiln::dropout<0.5>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 3; }
