// kiln/optim/adam.hpp — Adam and AdamW (PyTorch's torch.optim.Adam / AdamW).
//
// WHAT THEY COMPUTE, per parameter w with gradient g, at step t = 1, 2, ...
// (element-wise; in blocks, the moments first, then the parameters:
// detail::update_block):
//   adam:   g ← g + weight_decay·w                       (L2, coupled)
//   adamw:  w ← w − lr·weight_decay·w                    (decoupled decay)
//   both:   m ← β1·m + (1 − β1)·g
//           v ← β2·v + (1 − β2)·g²
//           w ← w − lr · (m / (1 − β1ᵗ)) / (√(v / (1 − β2ᵗ)) + ε)
//
// REQUIREMENTS   lr > 0, 0 ≤ β1, β2 < 1, ε > 0, weight_decay ≥ 0;
//                violated → std::invalid_argument.
// STATE          m and v in the parameters' layout (one buffer [m | v]).
//                t is the step's number, which kiln::train_step gives from
//                the program's step count (restored by a checkpoint); a
//                step skipped for a non-finite loss does not count.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <kiln/optim/optimizer.hpp>

namespace kiln {

namespace detail {
template <bool Decoupled>
struct adam_family {
  static constexpr std::string_view name = Decoupled ? "adamw" : "adam";

  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = Decoupled ? 1e-2f : 0.0f;

  void validate() const {
    auto fail = [](const char* what, float v) {
      throw std::invalid_argument(fmt::format("kiln::{}: {} (got {})", name, what, v));
    };
    if (!(lr > 0) || !std::isfinite(lr)) fail("lr must be > 0", lr);
    if (!(beta1 >= 0 && beta1 < 1)) fail("beta1 must be in [0, 1)", beta1);
    if (!(beta2 >= 0 && beta2 < 1)) fail("beta2 must be in [0, 1)", beta2);
    if (!(eps > 0)) fail("eps must be > 0", eps);
    if (!(weight_decay >= 0)) fail("weight_decay must be >= 0", weight_decay);
  }

  template <class T>
  class state {
   public:
    explicit state(std::size_t parameters) : n_(parameters), moments_(2 * parameters, T(0)) {}

    /// Update t (1, 2, ...) of the whole buffer.
    void step(const adam_family& o, std::span<T> w, std::span<const T> g, std::uint64_t t) noexcept {
      prepare(o, t);
      update(o, w, g, 0);
    }
    /// Fixes the bias corrections of step t (t ≥ 1).
    void prepare(const adam_family& o, std::uint64_t t) noexcept {
      const double n = static_cast<double>(t < 1 ? 1 : t);
      c1_ = T(1) / (T(1) - static_cast<T>(std::pow(static_cast<double>(o.beta1), n)));
      c2_ = T(1) / (T(1) - static_cast<T>(std::pow(static_cast<double>(o.beta2), n)));
    }
    void update(const adam_family& o, std::span<T> w, std::span<const T> g, std::size_t offset) noexcept {
      T* m = moments_.data() + offset;
      T* v = moments_.data() + n_ + offset;
      const T lr = o.lr, b1 = o.beta1, b2 = o.beta2, eps = o.eps, wd = o.weight_decay;
      const T c1 = c1_, c2 = c2_;
      // The moments, then the parameters, block by block
      // (detail::update_block says why).
      detail::for_each_update_block(w.size(), [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          T gi = g[i];
          if constexpr (!Decoupled) gi += wd * w[i];
          m[i] = b1 * m[i] + (T(1) - b1) * gi;
          v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
        }
        for (std::size_t i = begin; i < end; ++i) {
          T wi = w[i];
          if constexpr (Decoupled) wi -= lr * wd * wi;
          w[i] = wi - lr * (m[i] * c1) / (std::sqrt(v[i] * c2) + eps);
        }
      });
    }

    /// [m | v], for checkpoints.
    std::span<T> buffer() noexcept { return moments_; }
    std::span<const T> buffer() const noexcept { return moments_; }

   private:
    std::size_t n_;
    std::vector<T> moments_;
    T c1_ = 1, c2_ = 1;
  };
};
}  // namespace detail

/// Adam: L2 weight decay added to the gradient. `adam{.lr = 1e-3f}`.
using adam = detail::adam_family<false>;
/// AdamW: decoupled weight decay (Loshchilov & Hutter). `adamw{.lr = 1e-3f, .weight_decay = 1e-2f}`.
using adamw = detail::adam_family<true>;

}  // namespace kiln
