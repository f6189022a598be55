// kiln/layers/position_wise.hpp — one layer applied to every position of a sequence.
//
// WHAT IT COMPUTES   for a sequence x of L rows of D values, row i of the
//                    output is Layer(row i of x), with the same weights for
//                    every row (the Transformer's position-wise feed-forward;
//                    PyTorch's nn.Linear on a [batch, L, D] tensor).
// SHAPE CONTRACT     input shape<L, D> → shape<L, E>, where Layer maps
//                    shape<D> to shape<E>; the parameters are Layer's.
// REQUIREMENTS       the input has rank 2; Layer takes a vector and gives a vector.
// COST               Layer runs once over L × B columns: a dense layer is one
//                    GEMM for the whole step.
// THREAD SAFETY      as Layer.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>

#include <kiln/detail/chain.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/detail/signature.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool position_wise_input_must_be_a_sequence_of_rank_2 = InputShape::rank == 2;
template <class LayerAt, class RowOutputShape>
inline constexpr bool position_wise_layer_must_give_a_vector_per_position = RowOutputShape::rank == 1;
}  // namespace diagnostics

template <class Layer>
struct position_wise {
  using kiln_layer = void;
  using declared_parameters = typename detail::declared_by<Layer>::type;
  static constexpr init init_hint = init_hint_of<Layer>();
  static std::string name() { return detail::name_with<false, Layer>("position_wise"); }
  /// As kiln::model::signature names it (a model inside is "model").
  static std::string signature_name() { return detail::name_with<true, Layer>("position_wise"); }

  /// Layer bound to one row of In.
  template <Shape In, std::size_t Position, class Declared>
  using bound_row_layer =
      detail::bound_t<Layer, shape<In::size / (In::rank == 2 ? In::extent(0) : 1)>, Position, Declared>;

  /// (contents_of: when Layer holds layers, a model say, the model's
  /// signature lists them after this one.)
  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<position_wise, In, Position>,
                detail::contents_of<bound_row_layer<In, Position, Declared>> {
    static constexpr std::size_t rows = In::rank == 2 ? In::extent(0) : 1;
    using row_shape = shape<In::size / rows>;
    using inner = bound_row_layer<In, Position, Declared>;
    static_assert(layer_traits<inner>::checked || true);  // (it reports, once)
    /// Every optional member: each passes its layer's on.
    using provides = kiln::provides<member::positions, member::state, member::saved, member::workspace,
                                    member::bf16_activations, member::bf16_input, member::reserve>;
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    // (When Layer rejected its row, that error comes alone.)
    static constexpr bool accepted = [] {
      static_assert(
          diagnostics::position_wise_input_must_be_a_sequence_of_rank_2<layer_at<Position, position_wise>, In>,
          "kiln::position_wise<Layer>: the input must be a sequence shape<L, D> (rank 2)");
      if constexpr (!detail::accepted_of<inner>()) {
        return false;
      } else {
        static_assert(
            diagnostics::position_wise_layer_must_give_a_vector_per_position<layer_at<Position, position_wise>,
                                                                             typename inner::output_shape>,
            "kiln::position_wise<Layer>: Layer must map a vector to a vector");
        return diagnostics::position_wise_input_must_be_a_sequence_of_rank_2<layer_at<Position, position_wise>, In> &&
               inner::output_shape::rank == 1;
      }
    }();
    static_assert(accepted || true);  // (it reports, once)
    using output_shape = shape<rows, inner::output_shape::size>;
    static constexpr std::size_t positions = detail::positions_of<inner>();
    using parameters = typename inner::parameters;
    using state = detail::state_of_t<inner>;
    static constexpr bool is_view = inner::is_view;
    template <std::size_t B, class A = float>
    static constexpr std::size_t saved = detail::saved_of<inner, B * rows, A>();
    template <std::size_t B, class A = float>
    static constexpr std::size_t workspace = detail::workspace_of<inner, B * rows, A>();
    /// It takes bf16 activations when its layer does (they pass through).
    static constexpr bool bf16_activations = detail::takes_bf16_activations<inner>();
    static constexpr bool bf16_input = detail::takes_bf16_input<inner>();
    template <std::size_t B, class T>
    static void reserve(detail::gemm_scratch<T>& g) {
      detail::reserve_for<inner, B * rows, T>(g);
    }

    template <class Ctx>
    static void forward(const Ctx& c) {
      inner::forward(c.template widen<rows>());
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      inner::backward(c.template widen<rows>());
    }
  };
};

}  // namespace kiln
