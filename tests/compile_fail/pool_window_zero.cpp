// max_pool<0>: the layer and its position are named, and no division by zero follows it.
// expect: kiln::max_pool / avg_pool<Window, Stride>: Window and Stride must be at least 1
// expect: pooling_window_and_stride_must_be_at_least_1<kiln::layer_at<2, kiln::max_pool<0(, 0)?> ?>, 0, 0>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<2, 3>, kiln::max_pool<0>, kiln::flatten, kiln::dense<2>>;
#else
using net = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<2, 3>, kiln::max_pool<2>, kiln::flatten, kiln::dense<2>>;
#endif

int main() { return net::parameter_count > 0 ? 0 : 1; }
