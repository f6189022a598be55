// kiln/layers/tanh.hpp — hyperbolic tangent.
//
// WHAT IT COMPUTES   y = tanh(x), element-wise; dy/dx = 1 − y².
// SHAPE CONTRACT     input S → output S (any rank); no parameters.
// INITIALISATION     a dense layer right before tanh starts Glorot-uniform.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <string>

#include <kiln/detail/elementwise.hpp>

namespace kiln {

namespace detail {
struct tanh_fn {
  template <class X, class Y>
  static void forward(const X& x, Y& y) {
    y = x.tanh();
  }
  template <class Yv, class DY, class DX>
  static void backward(const Yv& y, const DY& dy, DX& dx) {
    dx = dy * (typename Yv::Scalar(1) - y.square());
  }
};
}  // namespace detail

/// kiln::tanh, the layer (std::tanh is the function).
struct tanh : detail::elementwise_layer<tanh, detail::tanh_fn> {
  static constexpr init init_hint = init::glorot_uniform;
  static std::string name() { return "tanh"; }
};

}  // namespace kiln
