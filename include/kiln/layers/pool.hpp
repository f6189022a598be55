// kiln/layers/pool.hpp — max and average pooling over height and width.
//
// WHAT THEY COMPUTE
//   max_pool<K, S>: y[c, i, j] = max over the K × K window at (i·S, j·S);
//                   backward sends the gradient to the window's first
//                   maximum in row-major order (recomputed from x and y).
//                   A window holding a NaN gives NaN.
//   avg_pool<K, S>: the window's mean; backward spreads it evenly.
//   S defaults to K (non-overlapping windows); there is no padding, and a
//   window that would cross the edge is not formed (floor, as PyTorch).
//
// SHAPE CONTRACT   input shape<C, H, W> → output shape<C, (H − K)/S + 1, (W − K)/S + 1>;
//                  no parameters. Layout as kiln/layers/conv2d.hpp.
// REQUIREMENTS     K, S ≥ 1; the input is rank 3 and at least K × K.
// COST             one pass over x forward; backward reads x, y and dy and
//                  writes dx. 2 × 2 windows of stride 2 in float run 8
//                  windows per AVX-512 instruction, or two AVX2 ones
//                  (kiln/detail/pool2x2.hpp).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include <kiln/bf16.hpp>
#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/pool2x2.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool pooling_input_must_be_channels_height_width = InputShape::rank == 3;
template <class LayerAt, class InputShape, std::size_t Window>
inline constexpr bool pooling_window_must_fit_the_input = [] {
  if constexpr (InputShape::rank != 3) {
    return true;
  } else {
    return Window <= InputShape::extent(1) && Window <= InputShape::extent(2);
  }
}();
template <class LayerAt, std::size_t Window, std::size_t Stride>
inline constexpr bool pooling_window_and_stride_must_be_at_least_1 = Window > 0 && Stride > 0;
}  // namespace diagnostics

namespace detail {
template <class Spec, std::size_t Window, std::size_t Stride, bool Max>
struct pool_layer {
  using kiln_layer = void;
  /// Window and Stride, or 1 as a stand-in for 0 (so that error comes alone).
  static constexpr std::size_t window = Window > 0 ? Window : 1, stride = Stride > 0 ? Stride : 1;

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<Spec, In, Position> {
    using provides = kiln::provides<member::bf16_activations>;
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(diagnostics::pooling_window_and_stride_must_be_at_least_1<layer_at<Position, Spec>, Window, Stride>,
                    "kiln::max_pool / avg_pool<Window, Stride>: Window and Stride must be at least 1");
      static_assert(diagnostics::pooling_input_must_be_channels_height_width<layer_at<Position, Spec>, In>,
                    "kiln::max_pool / avg_pool: the input must be channels × height × width (rank 3)");
      static_assert(diagnostics::pooling_window_must_fit_the_input<layer_at<Position, Spec>, In, window>,
                    "kiln::max_pool / avg_pool: the window is larger than the input");
      return diagnostics::pooling_window_and_stride_must_be_at_least_1<layer_at<Position, Spec>, Window, Stride> &&
             diagnostics::pooling_input_must_be_channels_height_width<layer_at<Position, Spec>, In> &&
             diagnostics::pooling_window_must_fit_the_input<layer_at<Position, Spec>, In, window>;
    }();
    static_assert(accepted || true);  // (it reports, once)
    static constexpr bool fits =
        In::rank == 3 && diagnostics::pooling_window_must_fit_the_input<layer_at<Position, Spec>, In, window>;
    // (a stand-in size when the input does not fit, so that the error above comes alone)
    static constexpr std::size_t C = In::extent(0), H = fits ? In::extent(1) : window,
                                 W = fits ? In::extent(2) : window;
    static constexpr std::size_t Ho = (H - window) / stride + 1, Wo = (W - window) / stride + 1;

    using output_shape = shape<C, Ho, Wo>;
    using parameters = param_list<>;
    /// Under precision<bf16> it reads and writes bf16 activations: a plane
    /// at a time widened to f32 (on the stack, up to 64 × 64), or value by
    /// value for larger planes.
    static constexpr bool bf16_activations = true;

    /// 2 × 2 windows of stride 2 in float take the vector kernels (detail/pool2x2.hpp).
    template <class T>
    static constexpr bool vectorised = [] {
#if defined(__AVX512F__) || defined(KILN_DETAIL_POOL2X2_AVX2)
      return std::is_same_v<T, float> && window == 2 && stride == 2;
#else
      return false;
#endif
    }();

    template <class Ctx>
    static void forward(const Ctx& c) {
      using T = typename Ctx::scalar;
      if constexpr (Ctx::bf16_activations && H * W <= staged_plane) {
        alignas(64) T xs[H * W], ys[Ho * Wo];
        for (std::size_t plane = 0; plane < Ctx::batch * C; ++plane) {
          detail::widen(c.x + plane * H * W, H * W, xs);
          forward_plane(xs, ys);
          detail::narrow(ys, Ho * Wo, c.y + plane * Ho * Wo);
        }
      } else {
        for (std::size_t plane = 0; plane < Ctx::batch * C; ++plane)
          forward_plane(c.x + plane * H * W, c.y + plane * Ho * Wo);
      }
    }

    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      if (!c.dx) return;
      if constexpr (Ctx::bf16_activations && H * W <= staged_plane) {
        alignas(64) T xs[H * W], ys[Ho * Wo];
        for (std::size_t plane = 0; plane < Ctx::batch * C; ++plane) {
          detail::widen(c.x + plane * H * W, H * W, xs);
          detail::widen(c.y + plane * Ho * Wo, Ho * Wo, ys);
          backward_plane(xs, ys, c.dy + plane * Ho * Wo, c.dx + plane * H * W);
        }
      } else {
        for (std::size_t plane = 0; plane < Ctx::batch * C; ++plane)
          backward_plane(c.x + plane * H * W, c.y + plane * Ho * Wo, c.dy + plane * Ho * Wo, c.dx + plane * H * W);
      }
    }

   private:
    static constexpr std::size_t staged_plane = 64 * 64;

    /// One plane: x is H × W, y Ho × Wo (X, Y: the scalar, or bf16 storage).
    template <class X, class Y>
    static void forward_plane(const X* x, Y* y) {
      using T = decltype(detail::value_of(*x));
#if defined(__AVX512F__) || defined(KILN_DETAIL_POOL2X2_AVX2)
      if constexpr (vectorised<T> && std::is_same_v<X, T> && std::is_same_v<Y, T>) {
        detail::pool_kernels::pool2x2_forward<Max>(x, H, W, y);
        return;
      }
#endif
      {
        for (std::size_t i = 0; i < Ho; ++i)
          for (std::size_t j = 0; j < Wo; ++j) {
            const X* corner = x + i * stride * W + j * stride;
            T acc = Max ? detail::value_of(corner[0]) : T(0);
            for (std::size_t u = 0; u < window; ++u)
              for (std::size_t v = 0; v < window; ++v) {
                const T value = detail::value_of(corner[u * W + v]);
                if constexpr (Max) {
                  acc = value > acc || value != value ? value : acc;  // (a NaN propagates)
                } else {
                  acc += value;
                }
              }
            y[i * Wo + j] = detail::stored_as<Y>(Max ? acc : acc / T(window * window));
          }
      }
    }

    /// One plane's input gradient dx (H × W) from dy (Ho × Wo).
    template <class X, class T>
    static void backward_plane(const X* x, const X* y, const T* dy, T* dx) {
#if defined(__AVX512F__) || defined(KILN_DETAIL_POOL2X2_AVX2)
      if constexpr (vectorised<T> && std::is_same_v<X, T>) {
        detail::pool_kernels::pool2x2_backward<Max>(x, y, dy, H, W, dx);
        return;
      }
#endif
      {
        std::fill_n(dx, H * W, T(0));
        for (std::size_t i = 0; i < Ho; ++i)
          for (std::size_t j = 0; j < Wo; ++j) {
            const std::size_t corner = i * stride * W + j * stride;
            const T g = dy[i * Wo + j];
            if constexpr (Max) {
              bool sent = false;
              for (std::size_t u = 0; u < window && !sent; ++u)
                for (std::size_t v = 0; v < window && !sent; ++v)
                  if (detail::value_of(x[corner + u * W + v]) == detail::value_of(y[i * Wo + j])) {
                    dx[corner + u * W + v] += g;
                    sent = true;
                  }
            } else {
              const T share = g / T(window * window);
              for (std::size_t u = 0; u < window; ++u)
                for (std::size_t v = 0; v < window; ++v) dx[corner + u * W + v] += share;
            }
          }
      }
    }
  };
};
}  // namespace detail

template <std::size_t Window, std::size_t Stride = Window>
struct max_pool : detail::pool_layer<max_pool<Window, Stride>, Window, Stride, true> {
  static std::string name() { return fmt::format("max_pool<{}, {}>", Window, Stride); }
};

template <std::size_t Window, std::size_t Stride = Window>
struct avg_pool : detail::pool_layer<avg_pool<Window, Stride>, Window, Stride, false> {
  static std::string name() { return fmt::format("avg_pool<{}, {}>", Window, Stride); }
};

}  // namespace kiln
