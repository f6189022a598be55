// kiln/layers/residual.hpp — a branch whose output is added to its input.
//
// WHAT IT COMPUTES   y = x + Branch(x), where Branch is Layers... applied one
//                    after another (a skip connection, as in ResNet and the
//                    Transformer).
// SHAPE CONTRACT     input S → output S; Layers... must map S back to S.
//                    Parameters: those of Layers... (bound at the positions
//                    that follow the residual's own).
// REQUIREMENTS       at least one layer; the branch keeps the shape.
// MEMORY             the branch's activations are kept for backward in the
//                    residual's own saved region (see kiln/detail/chain.hpp).
// THREAD SAFETY      as its layers.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>
#include <type_traits>

#include <kiln/bf16.hpp>
#include <kiln/detail/chain.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/detail/signature.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape, class BranchOutputShape>
inline constexpr bool residual_branch_must_keep_the_shape_of_its_input = std::is_same_v<InputShape, BranchOutputShape>;
template <class LayerAt, std::size_t Count>
inline constexpr bool residual_needs_at_least_one_layer = Count > 0;
}  // namespace diagnostics

template <class... Layers>
struct residual {
  using kiln_layer = void;
  using declared_parameters = detail::declared_of<Layers...>;
  static std::string name() { return detail::name_with<false, Layers...>("residual"); }
  /// As kiln::model::signature names it (a model inside is "model").
  static std::string signature_name() { return detail::name_with<true, Layers...>("residual"); }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<residual, In, Position>,
                // (the branch bound first, straight from here: a layer of it that
                // rejects its input has one line less of context above its error)
                private detail::bind_chain<Declared, In, Position + 1, detail::type_list<Layers...>>,
                detail::chain_layer<detail::sub_chain<Declared, In, Position + 1, Layers...>> {
    using body = detail::sub_chain<Declared, In, Position + 1, Layers...>;
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    // When a layer of the branch rejected its input, that error comes alone:
    // the branch's output is then a stand-in, not a shape to check.
    static constexpr bool accepted = [] {
      if constexpr (sizeof...(Layers) == 0) {
        static_assert(diagnostics::residual_needs_at_least_one_layer<layer_at<Position, residual>, sizeof...(Layers)>,
                      "kiln::residual<Layers...>: give the branch at least one layer");
        return false;
      } else if constexpr (!body::accepted) {
        return false;
      } else {
        static_assert(diagnostics::residual_branch_must_keep_the_shape_of_its_input<layer_at<Position, residual>, In,
                                                                                    typename body::output_shape>,
                      "kiln::residual<Layers...>: the branch must give back the shape it receives (its output is "
                      "added to its input)");
        return std::is_same_v<In, typename body::output_shape>;
      }
    }();
    static_assert(accepted || true);  // (it reports, once)
    using output_shape = In;          // (also the stand-in when the branch changes it)

    template <class Ctx>
    static void forward(const Ctx& c) {
      body::forward(c);
      if constexpr (std::is_same_v<typename body::output_shape, In>) {
        const auto* branch = body::output(c);
        for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) {
          if constexpr (Ctx::bf16_activations) {  // (stored in bf16, added in f32)
            c.y[i] = bf16::from(static_cast<float>(c.x[i]) + static_cast<float>(branch[i]));
          } else {
            c.y[i] = c.x[i] + branch[i];
          }
        }
      }
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      body::backward(c);
      if (c.dx)
        for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) c.dx[i] += c.dy[i];
    }
  };
};

}  // namespace kiln
