// position_wise applies a layer to every row of a sequence: a vector has none.
// expect: kiln::position_wise<Layer>: the input must be a sequence shape<L, D> \(rank 2\)
// expect: position_wise_input_must_be_a_sequence_of_rank_2<kiln::layer_at<2, kiln::position_wise<kiln::dense<4> ?> ?>, kiln::shape<6> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<5>, kiln::dense<6>, kiln::position_wise<kiln::dense<4>>>;
#else
using net = kiln::model<kiln::input<3, 5>, kiln::position_wise<kiln::dense<6>>, kiln::position_wise<kiln::dense<4>>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 12; }
