// The number of attention heads must divide the width.
// expect: kiln::causal_self_attention<Heads>: Heads must divide the width D
// expect: attention_heads_must_divide_the_width<kiln::layer_at<2, kiln::causal_self_attention<3> ?>, 8, 3>
// expect-errors: 1
#include <kiln/kiln.hpp>

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<4, 8>, kiln::layer_norm, kiln::causal_self_attention<3>>;
#else
using net = kiln::model<kiln::input<4, 8>, kiln::layer_norm, kiln::causal_self_attention<2>>;
#endif

int main() { return static_cast<int>(net::output_shape_type::size) - 32; }
