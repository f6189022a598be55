// A pooling window larger than its input is rejected.
// expect: kiln::max_pool / avg_pool: the window is larger than the input
// expect: pooling_window_must_fit_the_input<kiln::layer_at<2, kiln::max_pool<4(, 4)?> ?>, kiln::shape<2, 3, 3>, 4>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<1, 5, 5>, kiln::conv2d<2, 3>, kiln::max_pool<4>>;
#else
using net = kiln::model<kiln::input<1, 5, 5>, kiln::conv2d<2, 3>, kiln::max_pool<3>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 2; }
