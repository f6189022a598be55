// A dropout rate outside [0, 1) is rejected.
// expect: kiln::dropout<Drop, OutOf>: drops Drop values in OutOf \(the rate Drop/OutOf\), so 0 <= Drop < OutOf
// expect: dropout_rate_must_be_at_least_0_and_below_1<kiln::layer_at<2, kiln::dropout<4, 4> ?>, 4, 4>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<4>, kiln::dense<3>, kiln::dropout<4, 4>>;
#else
using net = kiln::model<kiln::input<4>, kiln::dense<3>, kiln::dropout<1, 2>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 3; }
