// kiln/layers/gelu.hpp — Gaussian error linear unit (exact, erf form).
//
// WHAT IT COMPUTES   y = x·Φ(x) = x/2 · (1 + erf(x/√2)), element-wise
//                    (PyTorch's GELU with approximate='none');
//                    dy/dx = Φ(x) + x·φ(x).
// SHAPE CONTRACT     input S → output S (any rank); no parameters.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cmath>
#include <numbers>
#include <string>

#include <kiln/detail/elementwise.hpp>

namespace kiln {

namespace detail {
struct gelu_fn {
  // (std::erf element by element: Eigen's vectorised erf lives in its unsupported module)
  template <class E>
  static auto erf_of(const E& e) {
    return e.unaryExpr([](auto v) { return std::erf(v); });
  }
  template <class X, class Y>
  static void forward(const X& x, Y& y) {
    using T = typename X::Scalar;
    y = x * (T(0.5) * (T(1) + erf_of(x * T(std::numbers::sqrt2 / 2))));
  }
  static constexpr bool needs_input = true;
  template <class X, class DY, class DX>
  static void backward_from_input(const X& x, const DY& dy, DX& dx) {
    using T = typename X::Scalar;
    const T inv_sqrt_2pi = T(0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2);
    dx = dy *
         (T(0.5) * (T(1) + erf_of(x * T(std::numbers::sqrt2 / 2))) + x * inv_sqrt_2pi * (-T(0.5) * x.square()).exp());
  }
};
}  // namespace detail

struct gelu : detail::elementwise_layer<gelu, detail::gelu_fn> {
  static std::string name() { return "gelu"; }
};

}  // namespace kiln
