// kiln/layers/tanh.hpp — hyperbolic tangent.
//
// WHAT IT COMPUTES   y = tanh(x), element-wise; dy/dx = 1 − y².
// SHAPE CONTRACT     input S → output S (any rank); no parameters.
// INITIALISATION     a dense layer right before tanh starts Glorot-uniform.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>

#include <kiln/detail/elementwise.hpp>
#include <kiln/detail/vector_math.hpp>

namespace kiln {

namespace detail {
/// f32: kiln's vectorised tanh (detail/vector_math.hpp); f64: std::tanh.
struct tanh_fn {
  template <class X, class Y>
  static void forward(const X& x, Y& y) {
    vmath::tanh(x.data(), y.data(), static_cast<std::size_t>(x.size()));
  }
  template <class Yv, class DY, class DX>
  static void backward(const Yv& y, const DY& dy, DX& dx) {
    vmath::tanh_backward(y.data(), dy.data(), dx.data(), static_cast<std::size_t>(y.size()));
  }
};
}  // namespace detail

/// kiln::tanh, the layer (std::tanh is the function).
struct tanh : detail::elementwise_layer<tanh, detail::tanh_fn> {
  static constexpr init init_hint = init::glorot_uniform;
  static std::string name() { return "tanh"; }
};

}  // namespace kiln
