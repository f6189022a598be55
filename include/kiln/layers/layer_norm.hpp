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
#include <type_traits>

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
        if constexpr (widens_rows<A>) {
          alignas(64) T xs[D], ys[D];
          detail::widen(c.x + r * D, D, xs);
          forward_row(xs, ys, g, b);
          detail::narrow(ys, D, c.y + r * D);
        } else {
          forward_row(c.x + r * D, c.y + r * D, g, b);
        }
      }
    }

    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      using A = typename Ctx::activation;
      const T* g = c.template param<gain_tag>();
      T* dg = c.template grad<gain_tag>();
      T* db = c.template grad<bias_tag>();
      for (std::size_t r = 0; r < rows * Ctx::batch; ++r) {
        T* dx = c.dx ? c.dx + r * D : nullptr;
        if constexpr (widens_rows<A>) {
          alignas(64) T xs[D];
          detail::widen(c.x + r * D, D, xs);
          backward_row(xs, c.dy + r * D, dx, g, dg, db);
        } else {
          backward_row(c.x + r * D, c.dy + r * D, dx, g, dg, db);
        }
      }
    }

   private:
    /// bf16 activations: a row is widened into f32 once (exactly) and
    /// computed on as f32 rows are, its output rounded as other layers'
    /// are (detail::narrow), rather than each value widened where it is
    /// read. The row and its output are on the stack (at most 16 KiB); a
    /// row of over 2048 values is read in place, each value widened where
    /// it is read and each output rounded by bf16::from (which, unlike
    /// narrow with AVX512-BF16, keeps a subnormal output).
    template <class A>
    static constexpr bool widens_rows = std::is_same_v<A, bf16> && D <= 2048;

    /// One row: x (the scalar, or bf16 storage) into y, with gain g and bias b.
    template <class X, class Y, class T>
    static void forward_row(const X* x, Y* y, const T* g, const T* b) {
      T mean, rstd;
      statistics(x, mean, rstd);
      for (std::size_t i = 0; i < D; ++i)
        y[i] = detail::stored_as<Y>((detail::value_of(x[i]) - mean) * rstd * g[i] + b[i]);
    }

    /// One row's gradients: dγ, dβ (+)= its terms; dx (when not null) from dy.
    template <class X, class T>
    static void backward_row(const X* x, const T* dy, T* dx, const T* g, T* dg, T* db) {
      using detail::value_of;
      T mean, rstd;
      statistics(x, mean, rstd);
      for (std::size_t i = 0; i < D; ++i) {
        dg[i] += dy[i] * ((value_of(x[i]) - mean) * rstd);
        db[i] += dy[i];
      }
      const T sum_dxhat = lane_sum<T>([&](std::size_t i) { return dy[i] * g[i]; });
      const T sum_dxhat_xhat =
          lane_sum<T>([&](std::size_t i) { return dy[i] * g[i] * ((value_of(x[i]) - mean) * rstd); });
      if (dx) {
        for (std::size_t i = 0; i < D; ++i) {
          const T xhat = (value_of(x[i]) - mean) * rstd;
          dx[i] = rstd * (dy[i] * g[i] - (sum_dxhat + xhat * sum_dxhat_xhat) / T(D));
        }
      }
    }
  };
};

}  // namespace kiln
