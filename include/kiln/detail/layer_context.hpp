// kiln/detail/layer_context.hpp — what a bound layer's forward/backward sees.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>

#include <kiln/detail/gemm.hpp>

namespace kiln::detail {

/// Views of one layer's slice of the program for one step. Activations are
/// column-major `features × batch` (one sample per column, contiguous), i.e.
/// the row-major [batch, features] layout of PyTorch.
template <class T, std::size_t B, class Layout>
struct layer_context {
  using scalar = T;
  static constexpr std::size_t batch = B;

  const T* x = nullptr;   ///< input activations
  T* y = nullptr;         ///< output activations
  const T* dy = nullptr;  ///< gradient of the loss w.r.t. y (backward)
  T* dx = nullptr;        ///< gradient w.r.t. x, or null when nobody needs it
  const T* w = nullptr;   ///< the flat parameter buffer
  T* dw = nullptr;        ///< the flat gradient buffer
  gemm_scratch<T>* gemm = nullptr;
  T* scratch = nullptr;  ///< the layer's `workspace<B>` elements, if it declared any

  template <class Tag>
  const T* param() const {
    return w + Layout::template offset<Tag>;
  }
  template <class Tag>
  T* grad() const {
    return dw + Layout::template offset<Tag>;
  }
};

}  // namespace kiln::detail
