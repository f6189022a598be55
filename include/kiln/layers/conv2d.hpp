// kiln/layers/conv2d.hpp — 2-d convolution (cross-correlation, as PyTorch's Conv2d).
//
// WHAT IT COMPUTES
//   y[f, i, j] = b[f] + Σ_c Σ_u Σ_v W[f, c, u, v] · x[c, i·S + u − P, j·S + v − P]
//   (zero outside the input), for Filters filters of Kernel × Kernel, stride
//   S and zero padding P on every side. `conv2d<F, K, 1, same>` keeps the
//   height and width (P = (K − 1)/2, odd K).
//
// MEMORY LAYOUT
//   Samples are channels × height × width, row-major (PyTorch's NCHW, one
//   sample at a time): input shape<C, H, W>; for a one-channel image write
//   input<1, 28, 28>. The weight is row-major [F, C, K, K]
//   (nn.Conv2d.weight), the bias [F].
//
// SHAPE CONTRACT
//   input shape<C, H, W> → output shape<F, (H + 2P − K)/S + 1, (W + 2P − K)/S + 1>
//   parameters: weight shape<F, C, K, K> (He before relu, Glorot otherwise),
//               bias shape<F> (zeros).
//
// REQUIREMENTS
//   F, K, S ≥ 1; the input is rank 3; K ≤ H + 2P and K ≤ W + 2P; `same`
//   needs an odd K and S = 1.
//
// COST
//   Per sample: unfold the input (im2col, C·K·K × Ho·Wo scalars of the
//   program's scratch) and one GEMM of Ho·Wo × F × C·K·K; backward unfolds
//   again and runs two GEMMs plus the fold-back (col2im). The GEMMs are
//   kiln's AVX-512 or AVX2 kernels in float (Eigen's elsewhere); with stride
//   1 the unfold and fold-back move 16 floats per masked AVX-512 instruction
//   (kiln/detail/unfold.hpp). Under precision<bf16> on a CPU without
//   AVX512-BF16, where the products would round the unfolded input into a
//   copy (few filters, or few taps), each sample is widened to f32 first and unfolded in
//   f32 (C·H·W more scalars of scratch at most). No allocation.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>
#include <Eigen/Core>

#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/gemm.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/detail/lane_sum.hpp>
#include <kiln/detail/unfold.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

/// conv2d padding that keeps height and width (odd kernels, stride 1).
/// (Diagnostics print it as the Padding argument -1.)
inline constexpr int same = -1;

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool conv2d_input_must_be_channels_height_width = InputShape::rank == 3;
template <class LayerAt, class InputShape, std::size_t Kernel, std::size_t Padding>
inline constexpr bool conv2d_kernel_must_fit_the_padded_input = [] {
  if constexpr (InputShape::rank != 3) {
    return true;  // reported above
  } else {
    return Kernel <= InputShape::extent(1) + 2 * Padding && Kernel <= InputShape::extent(2) + 2 * Padding;
  }
}();
template <class LayerAt, std::size_t Filters, std::size_t Kernel, std::size_t Stride>
inline constexpr bool conv2d_filters_kernel_and_stride_must_be_at_least_1 = Filters > 0 && Kernel > 0 && Stride > 0;
template <class LayerAt, std::size_t Kernel, std::size_t Stride>
inline constexpr bool conv2d_same_padding_needs_an_odd_kernel_and_stride_1 = Kernel % 2 == 1 && Stride == 1;
template <class LayerAt, int Padding>
inline constexpr bool conv2d_padding_must_be_at_least_0_or_same = Padding >= same;
}  // namespace diagnostics

template <std::size_t Filters, std::size_t Kernel, std::size_t Stride = 1, int Padding = 0>
struct conv2d {
  using kiln_layer = void;
  /// Filters, Kernel and Stride, or 1 as a stand-in for 0 (so that error comes alone).
  static constexpr std::size_t filters = Filters > 0 ? Filters : 1, kernel = Kernel > 0 ? Kernel : 1,
                               stride = Stride > 0 ? Stride : 1;
  /// (0 as a stand-in for a negative Padding other than `same`.)
  static constexpr std::size_t pad = Padding == same ? (kernel - 1) / 2 : Padding > 0 ? std::size_t(Padding) : 0;

  static std::string name() {
    return Padding == same ? fmt::format("conv2d<{}, {}, {}, same>", Filters, Kernel, Stride)
                           : fmt::format("conv2d<{}, {}, {}, {}>", Filters, Kernel, Stride, Padding);
  }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<conv2d, In, Position> {
    using provides = kiln::provides<member::overwrites_gradients, member::bf16_activations, member::workspace,
                                    member::reserve>;
    // Its checks (of its arguments too): one error each, and the class stays
    // whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::conv2d_filters_kernel_and_stride_must_be_at_least_1<layer_at<Position, conv2d>,
                                                                                     Filters, Kernel, Stride>,
                    "kiln::conv2d<Filters, Kernel, Stride, Padding>: Filters, Kernel and Stride must be at least 1");
      static_assert(Padding != same || diagnostics::conv2d_same_padding_needs_an_odd_kernel_and_stride_1<
                                           layer_at<Position, conv2d>, Kernel, Stride>,
                    "kiln::conv2d: `same` padding needs an odd Kernel and Stride 1");
      static_assert(diagnostics::conv2d_padding_must_be_at_least_0_or_same<layer_at<Position, conv2d>, Padding>,
                    "kiln::conv2d: Padding is a count of pixels (>= 0) or kiln::same");
      static_assert(diagnostics::conv2d_input_must_be_channels_height_width<layer_at<Position, conv2d>, In>,
                    "kiln::conv2d: the input must be channels × height × width (rank 3); a one-channel image is "
                    "input<1, H, W>");
      static_assert(diagnostics::conv2d_kernel_must_fit_the_padded_input<layer_at<Position, conv2d>, In, kernel, pad>,
                    "kiln::conv2d: the kernel is larger than the padded input");
      return diagnostics::conv2d_filters_kernel_and_stride_must_be_at_least_1<layer_at<Position, conv2d>, Filters,
                                                                              Kernel, Stride> &&
             diagnostics::conv2d_input_must_be_channels_height_width<layer_at<Position, conv2d>, In> &&
             diagnostics::conv2d_kernel_must_fit_the_padded_input<layer_at<Position, conv2d>, In, kernel, pad> &&
             (Padding != same ||
              diagnostics::conv2d_same_padding_needs_an_odd_kernel_and_stride_1<layer_at<Position, conv2d>, Kernel,
                                                                                 Stride>) &&
             diagnostics::conv2d_padding_must_be_at_least_0_or_same<layer_at<Position, conv2d>, Padding>;
    }();
    static_assert(accepted || true);  // (it reports, once)

    static constexpr bool fits =
        In::rank == 3 &&
        diagnostics::conv2d_kernel_must_fit_the_padded_input<layer_at<Position, conv2d>, In, kernel, pad>;
    static constexpr std::size_t C = In::extent(0), H = fits ? In::extent(1) : kernel,
                                 W = fits ? In::extent(2) : kernel;
    // (a stand-in size when the input does not fit, so that the error above comes alone)
    static constexpr std::size_t Ho = (H + 2 * pad - kernel) / stride + 1, Wo = (W + 2 * pad - kernel) / stride + 1;
    static constexpr std::size_t F = filters, CKK = C * kernel * kernel, P = Ho * Wo;

    using output_shape = shape<F, Ho, Wo>;

    static constexpr bool overwrites_gradients = true;  // its parameters are its own (see layer_context)
    /// Under precision<bf16> it reads and writes bf16 activations (kiln/layer.hpp).
    static constexpr bool bf16_activations = true;
    using weight_tag = detail::auto_tag<Position, 0>;
    using bias_tag = detail::auto_tag<Position, 1>;
    using parameters = param_list<param<weight_tag, shape<F, C, kernel, kernel>, init::automatic>,
                             param<bias_tag, shape<F>, init::zeros>>;

   private:
    /// Under bf16 activations, where the products with the unfolded input
    /// skip packing and would round it into an f32 copy for each sample
    /// first (a CPU without AVX512-BF16, and few filters, a small unfolded
    /// input or a shallow one: gemm_scratch::rounds_into_copies_by_shape),
    /// the input is unfolded in f32 instead (its bf16 values widened,
    /// exactly) and given to them as detail::f32_of_bf16_values, which they
    /// read where it is. Elsewhere it is unfolded in bf16 (half the bytes)
    /// for the packing kernels. The same values either way: the same bits.
    /// (Decided at compile time from the forward product's shape. Where the
    /// weight gradient's, CKK × F × P, packs instead, it rounds the f32
    /// values while packing; where a product copies anyway by the rule that
    /// depends on this CPU's L2 (the unfolded input, or the weight, in half
    /// of it), it widens the bf16 ones into a copy: the same bits, a pass
    /// more.)
    template <class A>
    static constexpr bool unfolds_in_f32_for =
        std::is_same_v<A, bf16> && detail::gemm_scratch<float>::rounds_into_copies_by_shape(P, F, CKK);
    template <class Ctx>
    static constexpr bool unfolds_in_f32 = unfolds_in_f32_for<typename Ctx::activation>;

   public:
    /// The unfolded input (in bf16, half of it, under bf16 activations
    /// unless it unfolds in f32) and, in backward, its gradient; where a
    /// bf16 sample is unfolded in f32, that room holds the sample widened
    /// first (forward and backward, before the gradient's product: see
    /// unfold_sample), so it is at least C·H·W there.
    template <std::size_t B, class A = float>
    static constexpr std::size_t workspace =
        CKK * P + (unfolds_in_f32_for<A> ? std::max(CKK * P, C * H * W) : CKK * P);

    template <std::size_t B, class T>
    static void reserve(detail::gemm_scratch<T>& g) {
      g.reserve(P, F, CKK);  // forward
      g.reserve(CKK, F, P);  // weight gradient
      g.reserve(P, CKK, F);  // input gradient (unfolded)
    }

    // The unfolded input is column-major P × CKK (Caffe's layout): column
    // (ch, u, v) holds, for every output pixel p, the input value under
    // kernel tap (u, v) of channel ch — so unfolding copies runs of input
    // rows. The weight is the column-major CKK × F matrix Wc; a sample's
    // output, row-major [F, P], is the column-major P × F matrix
    // Yᵀ = cols · Wc.
    template <class Ctx>
    static void forward(const Ctx& c) {
      using T = typename Ctx::scalar;
      const auto* w = c.template gemm_param<weight_tag>();
      const T* b = c.template param<bias_tag>();
      for (std::size_t s = 0; s < Ctx::batch; ++s) {
        const auto* cols = unfold_sample(c, s);
        if constexpr (Ctx::bf16_activations) {
          // accumulate in f32 (ctx.wide), round into y with the bias
          T* acc = c.wide + s * F * P;
          c.gemm->template run<false, false>(P, F, CKK, cols, P, w, CKK, acc, P, false);
          for (std::size_t f = 0; f < F; ++f) detail::narrow(acc + f * P, P, c.y + s * F * P + f * P, b[f]);
        } else {
          T* y = c.y + s * F * P;
          for (std::size_t f = 0; f < F; ++f) std::fill_n(y + f * P, P, b[f]);
          c.gemm->template run<false, false>(P, F, CKK, cols, P, w, CKK, y, P, true);
        }
      }
    }

    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      T* dcols = c.scratch + CKK * P;
      const auto* w = c.template gemm_param<weight_tag>();
      T* dw = c.template grad<weight_tag>();
      T* db = c.template grad<bias_tag>();
      for (std::size_t s = 0; s < Ctx::batch; ++s) {
        const T* dy = c.dy + s * F * P;
        const bool add = s > 0 || !c.overwrite_gradients;
        const auto* cols = unfold_sample(c, s);
        c.gemm->template run<true, false>(CKK, F, P, cols, P, dy, P, dw, CKK, add);  // dWc (+)= colsᵀ · Yᵀ
        // db[f] (+)= Σ_p dy[f, p]: 16 lanes of one fixed order, vectorised, the same bits on every CPU
        for (std::size_t f = 0; f < F; ++f) {
          const T* dyf = dy + f * P;
          const T sum = detail::lane_sum<T>(P, [&](std::size_t p) { return dyf[p]; });
          db[f] = add ? db[f] + sum : sum;
        }
        if (c.dx) {
          c.gemm->template run<false, true>(P, CKK, F, dy, P, w, CKK, dcols, P, false);  // dcols = dYᵀ · Wcᵀ
          col2im(dcols, c.dx + s * C * H * W);
        }
      }
    }

   private:
    /// Unfolds sample s of the input into the scratch; returns the unfolded
    /// matrix as the products take it.
    template <class Ctx>
    static auto unfold_sample(const Ctx& c, std::size_t s) {
      using A = typename Ctx::activation;
      const A* x = c.x + s * C * H * W;
      if constexpr (unfolds_in_f32<Ctx>) {
        float* wide = c.scratch + CKK * P;  // (the input gradient's room, not yet in use)
        detail::widen(x, C * H * W, wide);
        im2col(static_cast<const float*>(wide), c.scratch);
        return detail::as_rounded_operand(c.scratch);
      } else {
        A* cols = unfolded<A>(c);
        im2col(x, cols);
        return static_cast<const A*>(cols);
      }
    }

    /// Where the unfolded input goes: the first CKK·P scalars of the scratch
    /// (as bf16, the first half of them).
    template <class A, class Ctx>
    static A* unfolded(const Ctx& c) {
      if constexpr (std::is_same_v<A, typename Ctx::scalar>) {
        return c.scratch;
      } else {
        return reinterpret_cast<A*>(c.scratch);
      }
    }
    /// The input columns q = j·stride + v − pad, for output columns j in
    /// [first, last), that fall inside the image (the rest are padding).
    static constexpr std::ptrdiff_t first_inside(std::size_t v) {
      // smallest j with j·stride + v ≥ pad
      const std::ptrdiff_t need = static_cast<std::ptrdiff_t>(pad) - static_cast<std::ptrdiff_t>(v);
      return need <= 0 ? 0 : (need + static_cast<std::ptrdiff_t>(stride) - 1) / static_cast<std::ptrdiff_t>(stride);
    }
    /// Input column of output column j under tap v is j·stride + tap_shift(v).
    static constexpr std::ptrdiff_t tap_shift(std::size_t v) {
      return static_cast<std::ptrdiff_t>(v) - static_cast<std::ptrdiff_t>(pad);
    }
    static constexpr std::ptrdiff_t last_inside(std::size_t v) {
      // one past the largest j with j·stride + v − pad ≤ W − 1
      const std::ptrdiff_t top =
          static_cast<std::ptrdiff_t>(W) - 1 + static_cast<std::ptrdiff_t>(pad) - static_cast<std::ptrdiff_t>(v);
      if (top < 0) return 0;
      return std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(Wo), top / static_cast<std::ptrdiff_t>(stride) + 1);
    }

    /// Unfolds one sample: for every kernel tap (ch, u, v), each output row's
    /// run of in-image input values (the rest is zero padding).
    template <class T>
    static void im2col(const T* x, T* cols) {
      for (std::size_t ch = 0; ch < C; ++ch)
        for (std::size_t u = 0; u < kernel; ++u)
          for (std::size_t v = 0; v < kernel; ++v) {
            T* col = cols + ((ch * kernel + u) * kernel + v) * P;
            const std::ptrdiff_t j0 = first_inside(v), j1 = std::max(j0, last_inside(v));
            for (std::size_t i = 0; i < Ho; ++i) {
              T* out = col + i * Wo;
              const std::ptrdiff_t r = static_cast<std::ptrdiff_t>(i * stride + u) - static_cast<std::ptrdiff_t>(pad);
              if (r < 0 || r >= static_cast<std::ptrdiff_t>(H)) {
                for (std::size_t j = 0; j < Wo; ++j) out[j] = T{};
                continue;
              }
              const T* row = x + (ch * H + static_cast<std::size_t>(r)) * W;
              if constexpr (stride == 1) {
                // out[j] = row[j + v − pad]: one shifted run (vector-masked where the target has AVX-512 or AVX2;
                // its whole vectors may run on into the next rows of the column, which are written after it)
                detail::copy_window(row, tap_shift(v), j0, j1, static_cast<std::ptrdiff_t>(Wo), out,
                                    static_cast<std::ptrdiff_t>(P - i * Wo));
              } else {
                std::ptrdiff_t j = 0;
                for (; j < j0; ++j) out[j] = T{};
                for (; j < j1; ++j) out[j] = row[j * static_cast<std::ptrdiff_t>(stride) + tap_shift(v)];
                for (; j < static_cast<std::ptrdiff_t>(Wo); ++j) out[j] = T{};
              }
            }
          }
    }
    template <class T>
    static void col2im(const T* dcols, T* dx) {
#if defined(KILN_DETAIL_GATHER_TAPS)
      if constexpr (stride == 1 && std::is_same_v<T, float>) {
        // Row r of channel ch gathers, from every tap (u, v) whose output
        // row i = r + pad − u exists, that row's run shifted by v − pad.
        // Consecutive rows with the same taps (the same u exist: all but
        // the edge rows) are gathered up to 4 at a time, each reading one
        // output row further.
        detail::tap_run taps[kernel * kernel];
        const auto taps_of = [](std::size_t r) {  // the u whose output row exists, [lo, hi)
          const auto top = static_cast<std::ptrdiff_t>(r + pad), rows = static_cast<std::ptrdiff_t>(Ho);
          return std::pair{std::max<std::ptrdiff_t>(0, top - rows + 1),
                           std::min<std::ptrdiff_t>(static_cast<std::ptrdiff_t>(kernel), top + 1)};
        };
        for (std::size_t ch = 0; ch < C; ++ch)
          for (std::size_t r = 0; r < H;) {
            std::ptrdiff_t count = 0;
            const auto [lo, hi] = taps_of(r);
            for (std::ptrdiff_t u = lo; u < hi; ++u) {
              const std::ptrdiff_t i = static_cast<std::ptrdiff_t>(r + pad) - u;
              for (std::size_t v = 0; v < kernel; ++v)
                taps[count++] = {dcols + ((ch * kernel + static_cast<std::size_t>(u)) * kernel + v) * P +
                                     static_cast<std::size_t>(i) * Wo,
                                 tap_shift(v), first_inside(v), std::max(first_inside(v), last_inside(v))};
            }
            std::size_t rows = 1;
            while (rows < 4 && r + rows < H && taps_of(r + rows) == std::pair{lo, hi}) ++rows;
            detail::gather_taps(taps, count, static_cast<std::ptrdiff_t>(W), dx + (ch * H + r) * W,
                                static_cast<std::ptrdiff_t>(rows), static_cast<std::ptrdiff_t>(Wo),
                                static_cast<std::ptrdiff_t>(W));
            r += rows;
          }
        return;
      }
#endif
      std::fill_n(dx, C * H * W, T(0));
      for (std::size_t ch = 0; ch < C; ++ch)
        for (std::size_t u = 0; u < kernel; ++u)
          for (std::size_t v = 0; v < kernel; ++v) {
            const T* col = dcols + ((ch * kernel + u) * kernel + v) * P;
            const std::ptrdiff_t j0 = first_inside(v), j1 = std::max(j0, last_inside(v));
            for (std::size_t i = 0; i < Ho; ++i) {
              const std::ptrdiff_t r = static_cast<std::ptrdiff_t>(i * stride + u) - static_cast<std::ptrdiff_t>(pad);
              if (r < 0 || r >= static_cast<std::ptrdiff_t>(H)) continue;
              const T* in = col + i * Wo;
              T* row = dx + (ch * H + static_cast<std::size_t>(r)) * W;
              for (std::ptrdiff_t j = j0; j < j1; ++j)
                row[j * static_cast<std::ptrdiff_t>(stride) + tap_shift(v)] += in[j];
            }
          }
    }
  };
};

}  // namespace kiln
