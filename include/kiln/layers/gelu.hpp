// kiln/layers/gelu.hpp — Gaussian error linear unit (exact, erf form).
//
// WHAT IT COMPUTES   y = x·Φ(x) = x/2 · (1 + erf(x/√2)), element-wise
//                    (PyTorch's GELU with approximate='none');
//                    dy/dx = Φ(x) + x·φ(x).
// SHAPE CONTRACT     input S → output S (any rank); no parameters.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>
#include <type_traits>

#include <kiln/detail/elementwise.hpp>
#include <kiln/detail/vector_math.hpp>

namespace kiln {

namespace detail {
/// f32: kiln's vectorised Φ (detail/vector_math.hpp: ≤ 8 ulp for x ≥ −2,
/// the same bits on every CPU); f64: std::erf per element.
struct gelu_fn {
  template <class X, class Y>
  static void forward(const X& x, Y& y) {
    vmath::gelu(x.data(), y.data(), static_cast<std::size_t>(x.size()));
  }
  static constexpr bool needs_input = true;
  template <class X, class DY, class DX>
  static void backward_from_input(const X& x, const DY& dy, DX& dx) {
    vmath::gelu_backward(x.data(), dy.data(), dx.data(), static_cast<std::size_t>(x.size()));
  }
  // With the output stored in f32, Φ(x) = y / x: one division in place of
  // Φ's polynomials (vmath::gelu_backward's four-array form). In double,
  // and with bf16 activations (y rounded to 8 bits), Φ is computed from x.
  static constexpr bool needs_input_and_output = true;
  template <class X, class Y, class DY, class DX>
  static void backward_from_input_and_output(const X& x, const Y& y, const DY& dy, DX& dx) {
    const auto n = static_cast<std::size_t>(x.size());
    if constexpr (std::is_same_v<typename X::Scalar, float>) {
      vmath::gelu_backward(x.data(), y.data(), dy.data(), dx.data(), n);
    } else {
      vmath::gelu_backward(x.data(), dy.data(), dx.data(), n);
    }
  }
  // With bf16 activations the input is one of 2¹⁶ values: gelu and gelu′
  // are looked up in tables of the same kernels' results (the same bits;
  // vmath::gelu_of_bf16_values).
  static constexpr bool tabulates_bf16_values = true;
  template <class X, class Y>
  static void forward_of_bf16_values(const X& x, Y& y) {
    vmath::gelu_of_bf16_values(x.data(), y.data(), static_cast<std::size_t>(x.size()));
  }
  template <class X, class DY, class DX>
  static void backward_from_bf16_input(const X& x, const DY& dy, DX& dx) {
    vmath::gelu_backward_of_bf16_values(x.data(), dy.data(), dx.data(), static_cast<std::size_t>(x.size()));
  }
};
}  // namespace detail

struct gelu : detail::elementwise_layer<gelu, detail::gelu_fn> {
  static std::string name() { return "gelu"; }
};

}  // namespace kiln
