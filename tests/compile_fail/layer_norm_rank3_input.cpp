// layer_norm (and softmax) normalise over the last extent of a vector or of
// rows; an image (rank 3) is rejected.
// expect: kiln::layer_norm: the input must be a vector or rows of vectors \(rank 1 or 2\)
// expect: layer_norm_input_must_be_rank_1_or_2<kiln::layer_at<2, kiln::layer_norm>, kiln::shape<4, 6, 6> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<4, 3>, kiln::layer_norm>;
#else
using net = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<4, 3>, kiln::flatten, kiln::layer_norm>;
#endif

int main() { return static_cast<int>(net::parameter_count) - (4 * 9 + 4 + 2 * 144); }
