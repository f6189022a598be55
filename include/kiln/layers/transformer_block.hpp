// kiln/layers/transformer_block.hpp — a pre-norm Transformer decoder block.
//
// WHAT IT COMPUTES   (GPT-2's block, without dropout)
//                      h = x + causal_self_attention<Heads>(layer_norm(x))
//                      y = h + W₂·gelu(W₁·layer_norm(h) + b₁) + b₂   (per position)
//                    i.e. the model
//                      residual<layer_norm, causal_self_attention<Heads>>,
//                      residual<layer_norm, position_wise<dense<Hidden>>, gelu,
//                               position_wise<dense<D>>>
//                    whose layers take the positions after the block's own.
// SHAPE CONTRACT     input shape<L, D> → output shape<L, D>. Parameters:
//                    2 × layer_norm (2D each), attention (4D² + 4D),
//                    W₁ shape<Hidden, D>, b₁, W₂ shape<D, Hidden>, b₂.
// REQUIREMENTS       rank-2 input; Heads divides D; Hidden ≥ 1 (0: 4·D).
// THREAD SAFETY      as its layers.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include <kiln/detail/chain.hpp>
#include <kiln/layer.hpp>
#include <kiln/layers/attention.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/gelu.hpp>
#include <kiln/layers/layer_norm.hpp>
#include <kiln/layers/position_wise.hpp>
#include <kiln/layers/residual.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool transformer_block_input_must_be_a_sequence_shape_L_D = InputShape::rank == 2;
}  // namespace diagnostics

template <std::size_t Heads, std::size_t Hidden = 0>
struct transformer_block {
  using kiln_layer = void;
  static std::string name() {
    return "transformer_block<" + std::to_string(Heads) + (Hidden ? ", " + std::to_string(Hidden) : "") + ">";
  }

  template <Shape In>
  struct body_of {
    static constexpr std::size_t D = In::rank == 2 ? In::extent(1) : Heads;
    using sequence = std::conditional_t<In::rank == 2, In, shape<1, D>>;  // a stand-in: one error, not a cascade
    template <class Declared, std::size_t Position>
    using type = detail::sub_chain<
        Declared, sequence, Position, residual<layer_norm, causal_self_attention<Heads>>,
        residual<layer_norm, position_wise<dense<Hidden ? Hidden : 4 * D>>, gelu, position_wise<dense<D>>>>;
  };

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<transformer_block, In, Position>,
                detail::chain_layer<typename body_of<In>::template type<Declared, Position + 1>> {
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(
          diagnostics::transformer_block_input_must_be_a_sequence_shape_L_D<layer_at<Position, transformer_block>, In>,
          "kiln::transformer_block: the input must be a sequence shape<L, D> (rank 2)");
      return diagnostics::transformer_block_input_must_be_a_sequence_shape_L_D<layer_at<Position, transformer_block>,
                                                                               In> &&
             bind::chain::accepted;
    }();
    static_assert(accepted || true);  // (it reports, once)
    using output_shape = In;          // forward and backward: chain_layer's (the body's output, copied)
  };
};

}  // namespace kiln
