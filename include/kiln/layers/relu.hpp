// kiln/layers/relu.hpp — rectified linear unit.
//
// WHAT IT COMPUTES   y = max(x, 0), element-wise; dy/dx = 1 where y > 0.
// SHAPE CONTRACT     input S → output S (any rank); no parameters.
// INITIALISATION     a dense layer right before relu starts He-normal.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>

#include <kiln/detail/elementwise.hpp>
#include <kiln/detail/relu_bf16.hpp>

namespace kiln {

namespace detail {
struct relu_fn {
  template <class X, class Y>
  static void forward(const X& x, Y& y) {
    y = x.max(typename X::Scalar(0));
  }
  template <class Yv, class DY, class DX>
  static void backward(const Yv& y, const DY& dy, DX& dx) {
    dx = (y > typename Yv::Scalar(0)).select(dy, typename Yv::Scalar(0));
  }
  // bf16 activations: the input's own bits or zero (detail/relu_bf16.hpp)
  static constexpr bool works_on_bf16_bits = relu_bf16_in_vectors;
  static void forward_of_bf16(const bf16* x, std::size_t n, bf16* y) noexcept { relu_bf16(x, n, y); }
  static void backward_from_bf16(const bf16* y, const float* dy, std::size_t n, float* dx) noexcept {
    relu_bf16_backward(y, dy, n, dx);
  }
};
}  // namespace detail

struct relu : detail::elementwise_layer<relu, detail::relu_fn> {
  static constexpr init init_hint = init::he_normal;
  static std::string name() { return "relu"; }
};

}  // namespace kiln
