// kiln/layers/layer_norm.hpp — layer normalisation over the last extent.
//
// WHAT IT COMPUTES   for each row x of D values (the whole sample for
//                    shape<D>, each row for shape<L, D>):
//                      y = (x − mean x) / √(var x + ε) · γ + β,  ε = 1e-5,
//                    var the biased variance (PyTorch's nn.LayerNorm(D)).
// SHAPE CONTRACT     input S (rank 1 or 2, last extent D) → output S;
//                    parameters γ shape<D> (ones), β shape<D> (zeros).
// THREAD SAFETY      stateless; statistics are recomputed in backward.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cmath>
#include <cstddef>
#include <string>

#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/lane_sum.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool layer_norm_input_must_be_rank_1_or_2 = InputShape::rank == 1 || InputShape::rank == 2;
}  // namespace diagnostics

struct layer_norm {
  using kiln_layer = void;
  static std::string name() { return "layer_norm"; }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<layer_norm, In, Position> {
    using provides = kiln::provides<member::bf16_activations>;
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::layer_norm_input_must_be_rank_1_or_2<layer_at<Position, layer_norm>, In>,
                    "kiln::layer_norm: the input must be a vector or rows of vectors (rank 1 or 2)");
      return diagnostics::layer_norm_input_must_be_rank_1_or_2<layer_at<Position, layer_norm>, In>;
    }();
    static_assert(accepted || true);  // (it reports, once)
    using output_shape = In;
    static constexpr std::size_t D = In::extent(In::rank - 1), rows = In::size / D;
    using gain_tag = detail::auto_tag<Position, 0>;
    using bias_tag = detail::auto_tag<Position, 1>;
    using parameters = param_list<param<gain_tag, shape<D>, init::ones>, param<bias_tag, shape<D>, init::zeros>>;

    /// Under precision<bf16> it reads and writes bf16 activations (statistics in f32).
    static constexpr bool bf16_activations = true;

    /// Σ f(i) over a row, in one fixed order whatever the CPU (detail/lane_sum.hpp).
    template <class T, class F>
    static T lane_sum(F&& f) {
      return detail::lane_sum<T>(D, f);
    }

    /// A row's mean and 1/√(σ² + ε); X is the activations' storage.
    template <class X, class T>
    static void statistics(const X* x, T& mean, T& rstd) {
      using detail::value_of;
      const T m = lane_sum<T>([&](std::size_t i) { return static_cast<T>(value_of(x[i])); }) / T(D);
      const T v = lane_sum<T>([&](std::size_t i) {
        const T d = static_cast<T>(value_of(x[i])) - m;
        return d * d;
      });
      mean = m;
      rstd = T(1) / std::sqrt(v / T(D) + T(1e-5));
    }

    template <class Ctx>
    static void forward(const Ctx& c) {
      using T = typename Ctx::scalar;
      using A = typename Ctx::activation;
      const T* g = c.template param<gain_tag>();
      const T* b = c.template param<bias_tag>();
      for (std::size_t r = 0; r < rows * Ctx::batch; ++r) {
        const A* x = c.x + r * D;
        A* y = c.y + r * D;
        T mean, rstd;
        statistics(x, mean, rstd);
        for (std::size_t i = 0; i < D; ++i)
          y[i] = detail::stored_as<A>((detail::value_of(x[i]) - mean) * rstd * g[i] + b[i]);
      }
    }

    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      const T* g = c.template param<gain_tag>();
      T* dg = c.template grad<gain_tag>();
      T* db = c.template grad<bias_tag>();
      using detail::value_of;
      for (std::size_t r = 0; r < rows * Ctx::batch; ++r) {
        const auto* x = c.x + r * D;
        const T* dy = c.dy + r * D;
        T mean, rstd;
        statistics(x, mean, rstd);
        for (std::size_t i = 0; i < D; ++i) {
          dg[i] += dy[i] * ((value_of(x[i]) - mean) * rstd);
          db[i] += dy[i];
        }
        const T sum_dxhat = lane_sum<T>([&](std::size_t i) { return dy[i] * g[i]; });
        const T sum_dxhat_xhat =
            lane_sum<T>([&](std::size_t i) { return dy[i] * g[i] * ((value_of(x[i]) - mean) * rstd); });
        if (c.dx) {
          for (std::size_t i = 0; i < D; ++i) {
            const T xhat = (value_of(x[i]) - mean) * rstd;
            c.dx[r * D + i] = rstd * (dy[i] * g[i] - (sum_dxhat + xhat * sum_dxhat_xhat) / T(D));
          }
        }
      }
    }
  };
};

}  // namespace kiln
