// `same` padding cannot keep the size with an even kernel.
// expect: kiln::conv2d: `same` padding needs an odd Kernel and Stride 1
// expect: conv2d_same_padding_needs_an_odd_kernel_and_stride_1<kiln::layer_at<1, kiln::conv2d<2, 4, 1, -1> ?>, 4, 1>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<2, 4, 1, kiln::same>>;
#else
using net = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<2, 5, 1, kiln::same>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 128; }
