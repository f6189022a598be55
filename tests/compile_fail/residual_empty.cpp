// A residual needs a branch: residual<> would add its input to nothing.
// expect: kiln::residual<Layers...>: give the branch at least one layer
// expect: residual_needs_at_least_one_layer<kiln::layer_at<2, kiln::residual<> ?>, 0>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<4>, kiln::dense<4>, kiln::residual<>>;
#else
using net = kiln::model<kiln::input<4>, kiln::dense<4>, kiln::residual<kiln::relu>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 4; }
