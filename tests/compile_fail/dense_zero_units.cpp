// A dense layer of zero units is rejected.
// expect: kiln::dense<Units>: Units must be at least 1
// expect: dense_units_must_be_at_least_1<kiln::layer_at<1, kiln::dense<0> ?>, 0>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<4>, kiln::dense<0>>;
#else
using net = kiln::model<kiln::input<4>, kiln::dense<1>>;
#endif

int main() { return static_cast<int>(net::parameter_count) - 5; }
