// kiln/layers/sigmoid.hpp — logistic sigmoid.
//
// WHAT IT COMPUTES   y = 1 / (1 + e^−x), element-wise; dy/dx = y·(1 − y).
// SHAPE CONTRACT     input S → output S (any rank); no parameters.
// INITIALISATION     a dense layer right before sigmoid starts Glorot-uniform.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>

#include <kiln/detail/elementwise.hpp>
#include <kiln/detail/vector_math.hpp>

namespace kiln {

namespace detail {
/// f32: kiln's vectorised 1/(1 + e^−x) (detail/vector_math.hpp); f64: std::exp.
struct sigmoid_fn {
  template <class X, class Y>
  static void forward(const X& x, Y& y) {
    vmath::sigmoid(x.data(), y.data(), static_cast<std::size_t>(x.size()));
  }
  template <class Yv, class DY, class DX>
  static void backward(const Yv& y, const DY& dy, DX& dx) {
    dx = dy * y * (typename Yv::Scalar(1) - y);
  }
};
}  // namespace detail

struct sigmoid : detail::elementwise_layer<sigmoid, detail::sigmoid_fn> {
  static constexpr init init_hint = init::glorot_uniform;
  static std::string name() { return "sigmoid"; }
};

}  // namespace kiln
