// position_embedding adds one vector per position: the input must be a sequence.
// expect: kiln::position_embedding: the input must be a sequence shape<L, D> \(rank 2\)
// expect: position_embedding_input_must_be_a_sequence_shape_L_D<kiln::layer_at<2, kiln::position_embedding>, kiln::shape<6> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<5>, kiln::dense<6>, kiln::position_embedding>;
#else
using net = kiln::model<kiln::input<2, 3>, kiln::position_embedding>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 6; }
