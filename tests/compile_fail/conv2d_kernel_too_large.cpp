// A convolution kernel larger than its (padded) input is rejected, naming the
// layer, its position and the input shape.
// expect: kiln::conv2d: the kernel is larger than the padded input
// expect: conv2d_kernel_must_fit_the_padded_input<kiln::layer_at<3, kiln::conv2d<8, 5(, 1, 0)?> ?>, kiln::shape<4, 2, 2>, 5, 0>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<1, 6, 6>, kiln::conv2d<4, 3>, kiln::max_pool<2>, kiln::conv2d<8, 5>>;
#else
using net = kiln::model<kiln::input<1, 6, 6>, kiln::conv2d<4, 3>, kiln::max_pool<2>, kiln::conv2d<8, 5, 1, 2>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 8; }
