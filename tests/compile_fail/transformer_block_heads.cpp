// A transformer block whose head count does not divide the width is rejected
// by the attention inside it, which names its position within the block.
// expect: kiln::causal_self_attention<Heads>: Heads must divide the width D
// expect: attention_heads_must_divide_the_width<kiln::layer_at<5, kiln::causal_self_attention<5> ?>, 16, 5>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<4, 16>, kiln::position_embedding, kiln::transformer_block<5>>;
#else
using net = kiln::model<kiln::input<4, 16>, kiln::position_embedding, kiln::transformer_block<4>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 64; }
