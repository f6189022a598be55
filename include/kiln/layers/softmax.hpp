// kiln/layers/softmax.hpp — softmax as a layer (for outputs that are
// probabilities; a classifier trained with softmax_cross_entropy does not
// need it: that loss applies its own, stably).
//
// WHAT IT COMPUTES   y = exp(x − max x) / Σ exp(x − max x) over the last
//                    extent: the whole vector for shape<N>, each row for
//                    shape<L, N>. Backward: dx = y ⊙ (dy − Σ dy ⊙ y).
// SHAPE CONTRACT     input S (rank 1 or 2) → output S; no parameters.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <string>

#include <kiln/detail/vector_math.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool softmax_input_must_be_rank_1_or_2 = InputShape::rank == 1 || InputShape::rank == 2;
}  // namespace diagnostics

struct softmax {
  using kiln_layer = void;
  static std::string name() { return "softmax"; }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<softmax, In, Position> {
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::softmax_input_must_be_rank_1_or_2<layer_at<Position, softmax>, In>,
                    "kiln::softmax: the input must be a vector or rows of vectors (rank 1 or 2)");
      return diagnostics::softmax_input_must_be_rank_1_or_2<layer_at<Position, softmax>, In>;
    }();
    static_assert(accepted || true);  // (it reports, once)
    using output_shape = In;
    using parameters = param_list<>;
    static constexpr std::size_t N = In::extent(In::rank - 1), rows = In::size / N;

    template <class Ctx>
    static void forward(const Ctx& c) {
      using T = typename Ctx::scalar;
      for (std::size_t r = 0; r < rows * Ctx::batch; ++r) {
        const T* x = c.x + r * N;
        T* y = c.y + r * N;
        const T m = *std::max_element(x, x + N);
        const T sum = detail::vmath::exp_affine_sum(x, T(1), -m, N, y);  // y = e^(x − m), summed in order
        for (std::size_t i = 0; i < N; ++i) y[i] /= sum;
      }
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      if (!c.dx) return;
      for (std::size_t r = 0; r < rows * Ctx::batch; ++r) {
        const T* y = c.y + r * N;
        const T* dy = c.dy + r * N;
        T dot = 0;
        for (std::size_t i = 0; i < N; ++i) dot += dy[i] * y[i];
        for (std::size_t i = 0; i < N; ++i) c.dx[r * N + i] = y[i] * (dy[i] - dot);
      }
    }
  };
};

}  // namespace kiln
