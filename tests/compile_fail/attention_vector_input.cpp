// Attention needs a sequence shape<L, D>, not a vector.
// expect: kiln::causal_self_attention: the input must be a sequence shape<L, D> \(rank 2\)
// expect: attention_input_must_be_a_sequence_shape_L_D<kiln::layer_at<1, kiln::causal_self_attention<2> ?>, kiln::shape<8> ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<8>, kiln::causal_self_attention<2>>;
#else
using net = kiln::model<kiln::input<1, 8>, kiln::causal_self_attention<2>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 8; }
