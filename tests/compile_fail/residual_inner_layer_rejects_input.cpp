// A layer inside a residual branch that rejects its input is reported once,
// by that layer (naming its own position): the residual says nothing more
// about the stand-in shape the branch then gives back.
// expect: kiln::conv2d: the input must be channels × height × width \(rank 3\)
// expect: conv2d_input_must_be_channels_height_width<kiln::layer_at<2, kiln::conv2d<4, 3, 1, 1> ?>, kiln::shape<64> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<64>, kiln::residual<kiln::conv2d<4, 3, 1, 1>>>;
#else
using net = kiln::model<kiln::input<4, 8, 8>, kiln::residual<kiln::conv2d<4, 3, 1, 1>>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 256; }
