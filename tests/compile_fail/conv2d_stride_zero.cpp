// conv2d with stride 0: the layer and its position are named, and no division
// by zero follows it.
// expect: kiln::conv2d<Filters, Kernel, Stride, Padding>: Filters, Kernel and Stride must be at least 1
// expect: conv2d_filters_kernel_and_stride_must_be_at_least_1<kiln::layer_at<1, kiln::conv2d<4, 3, 0(, 0)?> ?>, 4, 3, 0>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<4, 3, 0>, kiln::flatten, kiln::dense<2>>;
#else
using net = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<4, 3, 1>, kiln::flatten, kiln::dense<2>>;
#endif

int main() { return net::parameter_count > 0 ? 0 : 1; }
