// kiln/layers/position_embedding.hpp — a learned vector added at each position.
//
// WHAT IT COMPUTES   y[i] = x[i] + P[i] for every position i of a sequence
//                    (GPT's learned position embedding, added after the
//                    token embedding so that attention can tell positions apart).
// SHAPE CONTRACT     input shape<L, D> → output shape<L, D>;
//                    parameter P shape<L, D> (zeros).
// REQUIREMENTS       rank-2 input.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <string>


#include <kiln/detail/layer_context.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool position_embedding_input_must_be_a_sequence_shape_L_D = InputShape::rank == 2;
}  // namespace diagnostics

struct position_embedding {
  using kiln_layer = void;
  static std::string name() { return "position_embedding"; }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<position_embedding, In, Position> {
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::position_embedding_input_must_be_a_sequence_shape_L_D<
                        layer_at<Position, position_embedding>, In>,
                    "kiln::position_embedding: the input must be a sequence shape<L, D> (rank 2)");
      return diagnostics::position_embedding_input_must_be_a_sequence_shape_L_D<layer_at<Position, position_embedding>,
                                                                                 In>;
    }();
    static_assert(accepted || true);  // (it reports, once)
    using output_shape = In;
    using table_tag = detail::auto_tag<Position, 0>;
    using parameters = param_list<param<table_tag, In, init::zeros>>;

    template <class Ctx>
    static void forward(const Ctx& c) {
      const auto* p = c.template param<table_tag>();
      for (std::size_t b = 0; b < Ctx::batch; ++b)
        for (std::size_t i = 0; i < In::size; ++i) c.y[b * In::size + i] = c.x[b * In::size + i] + p[i];
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      auto* dp = c.template grad<table_tag>();
      for (std::size_t b = 0; b < Ctx::batch; ++b)
        for (std::size_t i = 0; i < In::size; ++i) dp[i] += c.dy[b * In::size + i];
      if (c.dx) std::copy_n(c.dy, In::size * Ctx::batch, c.dx);
    }
  };
};

}  // namespace kiln
