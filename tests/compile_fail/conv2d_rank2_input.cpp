// A convolution fed a 28 × 28 image without a channel extent is rejected.
// expect: kiln::conv2d: the input must be channels × height × width \(rank 3\)
// expect: conv2d_input_must_be_channels_height_width<kiln::layer_at<1, kiln::conv2d<16, 5, 1, -1> ?>, kiln::shape<28, 28> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<28, 28>, kiln::conv2d<16, 5, 1, kiln::same>>;
#else
using net = kiln::model<kiln::input<1, 28, 28>, kiln::conv2d<16, 5, 1, kiln::same>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::rank) - 3; }
