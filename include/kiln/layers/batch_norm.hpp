// kiln/layers/batch_norm.hpp — batch normalisation per channel.
//
// WHAT IT COMPUTES   for every channel c, over the batch (and the channel's
//                    positions):  y = (x − μ_c) / √(σ²_c + ε) · γ_c + β_c,
//                    ε = 1e-5 (PyTorch's BatchNorm1d/BatchNorm2d):
//                      train mode: μ, σ² of this step's batch (biased σ²),
//                        and the running statistics move towards them:
//                        r ← 0.9·r + 0.1·batch value (unbiased σ² for r_var);
//                      eval mode: μ, σ² are the running statistics.
//                    Under replicate<N> every replica normalises with its own
//                    B samples (as PyTorch's DistributedDataParallel without
//                    SyncBatchNorm) and replica 0 keeps the running statistics.
// SHAPE CONTRACT     input shape<C> (features), shape<C, L> (sequences, as
//                    BatchNorm1d) or shape<C, H, W> (images) → the same shape;
//                    parameters γ shape<C> (ones), β shape<C> (zeros);
//                    state (not trained, saved in checkpoints): running mean
//                    shape<C> (zeros), running variance shape<C> (ones).
// REQUIREMENTS       more than one value per channel in a batch: batch<1> with
//                    a shape<C> input is a compile error.
// THREAD SAFETY      the running statistics live in the program's state
//                    buffer; only replica 0 writes them.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cmath>
#include <cstddef>
#include <string>


#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, std::size_t Batch, std::size_t ValuesPerChannelPerSample>
inline constexpr bool batch_norm_needs_more_than_one_value_per_channel_in_a_batch =
    Batch* ValuesPerChannelPerSample > 1;
}  // namespace diagnostics

struct batch_norm {
  using kiln_layer = void;
  static std::string name() { return "batch_norm"; }
  static constexpr double momentum = 0.1, epsilon = 1e-5;

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<batch_norm, In, Position> {
    using provides = kiln::provides<member::state, member::saved, member::bf16_activations>;
    using output_shape = In;
    static constexpr std::size_t C = In::extent(0), spatial = In::size / C;
    using gain_tag = detail::auto_tag<Position, 0>;
    using bias_tag = detail::auto_tag<Position, 1>;
    using mean_tag = detail::auto_tag<Position, 2>;  // state, not parameters
    using variance_tag = detail::auto_tag<Position, 3>;
    using parameters = param_list<param<gain_tag, shape<C>, init::ones>, param<bias_tag, shape<C>, init::zeros>>;
    using state = param_list<param<mean_tag, shape<C>, init::zeros>, param<variance_tag, shape<C>, init::ones>>;

    template <std::size_t B>
    static constexpr std::size_t saved_for() {
      static_assert(
          diagnostics::batch_norm_needs_more_than_one_value_per_channel_in_a_batch<layer_at<Position, batch_norm>, B,
                                                                                   spatial>,
          "kiln::batch_norm: a batch must give each channel more than one value; with a vector input "
          "use batch<2> or more");
      return 2 * C;  // the batch's mean and 1/√(σ² + ε) per channel
    }
    template <std::size_t B>
    static constexpr std::size_t saved = saved_for<B>();
    /// Under precision<bf16> it reads and writes bf16 activations (statistics in f32/f64 as always).
    static constexpr bool bf16_activations = true;

    template <class Ctx>
    static void forward(const Ctx& c) {
      using T = typename Ctx::scalar;
      using A = typename Ctx::activation;
      using detail::value_of;
      constexpr std::size_t B = Ctx::batch, N = B * spatial;
      const T* g = c.template param<gain_tag>();
      const T* b = c.template param<bias_tag>();
      T* running_mean = c.template state<mean_tag>();
      T* running_var = c.template state<variance_tag>();
      T* mean = c.saved;
      T* rstd = c.saved + C;
      for (std::size_t ch = 0; ch < C; ++ch) {
        T m, r;
        if (c.training) {
          double sum = 0, sq = 0;
          for (std::size_t s = 0; s < B; ++s) {
            const A* x = c.x + s * In::size + ch * spatial;
            for (std::size_t i = 0; i < spatial; ++i) sum += static_cast<double>(value_of(x[i]));
          }
          const double mu = sum / static_cast<double>(N);
          for (std::size_t s = 0; s < B; ++s) {
            const A* x = c.x + s * In::size + ch * spatial;
            for (std::size_t i = 0; i < spatial; ++i) {
              const double d = static_cast<double>(value_of(x[i])) - mu;
              sq += d * d;
            }
          }
          const double var = sq / static_cast<double>(N);
          m = static_cast<T>(mu);
          r = static_cast<T>(1.0 / std::sqrt(var + epsilon));
          if (c.keeps_state) {
            running_mean[ch] = static_cast<T>((1 - momentum) * running_mean[ch] + momentum * mu);
            running_var[ch] = static_cast<T>((1 - momentum) * running_var[ch] +
                                             momentum * var * static_cast<double>(N) / static_cast<double>(N - 1));
          }
        } else {
          m = running_mean[ch];
          r = static_cast<T>(1.0 / std::sqrt(static_cast<double>(running_var[ch]) + epsilon));
        }
        mean[ch] = m;
        rstd[ch] = r;
        const T scale = r * g[ch], shift = b[ch] - m * r * g[ch];
        for (std::size_t s = 0; s < B; ++s) {
          const A* x = c.x + s * In::size + ch * spatial;
          A* y = c.y + s * In::size + ch * spatial;
          for (std::size_t i = 0; i < spatial; ++i) y[i] = detail::stored_as<A>(value_of(x[i]) * scale + shift);
        }
      }
    }

    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      using A = typename Ctx::activation;
      using detail::value_of;
      constexpr std::size_t B = Ctx::batch, N = B * spatial;
      const T* g = c.template param<gain_tag>();
      T* dg = c.template grad<gain_tag>();
      T* db = c.template grad<bias_tag>();
      const T* mean = c.saved;
      const T* rstd = c.saved + C;
      for (std::size_t ch = 0; ch < C; ++ch) {
        T sum_dy = 0, sum_dy_xhat = 0;
        for (std::size_t s = 0; s < B; ++s) {
          const A* x = c.x + s * In::size + ch * spatial;
          const T* dy = c.dy + s * In::size + ch * spatial;
          for (std::size_t i = 0; i < spatial; ++i) {
            sum_dy += dy[i];
            sum_dy_xhat += dy[i] * (value_of(x[i]) - mean[ch]) * rstd[ch];
          }
        }
        dg[ch] += sum_dy_xhat;
        db[ch] += sum_dy;
        if (!c.dx) continue;
        const T k = g[ch] * rstd[ch];
        // Train mode: the statistics depend on x too; eval mode: they are constants.
        const T a = c.training ? sum_dy / T(N) : T(0), bx = c.training ? sum_dy_xhat / T(N) : T(0);
        for (std::size_t s = 0; s < B; ++s) {
          const A* x = c.x + s * In::size + ch * spatial;
          const T* dy = c.dy + s * In::size + ch * spatial;
          T* dx = c.dx + s * In::size + ch * spatial;
          for (std::size_t i = 0; i < spatial; ++i)
            dx[i] = k * (dy[i] - a - (value_of(x[i]) - mean[ch]) * rstd[ch] * bx);
        }
      }
    }
  };
};

}  // namespace kiln
