// kiln/optim/sgd.hpp — stochastic gradient descent (PyTorch's torch.optim.SGD).
//
// WHAT IT COMPUTES, per parameter w with gradient g (element-wise; in
// blocks, the velocity first, then the parameters: detail::update_block):
//   g ← g + weight_decay·w
//   v ← momentum·v + g                        (v starts at 0; dampening 0)
//   d ← nesterov ? g + momentum·v : v          (d = g when momentum = 0)
//   w ← w − lr·d
//
// REQUIREMENTS   lr > 0, 0 ≤ momentum < 1, weight_decay ≥ 0, nesterov only
//                with momentum > 0; violated → std::invalid_argument.
// STATE          one velocity buffer in the parameters' layout.
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

struct sgd {
  static constexpr std::string_view name = "sgd";

  float lr = 0.01f;
  float momentum = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;

  void validate() const {
    if (!(lr > 0) || !std::isfinite(lr))
      throw std::invalid_argument(fmt::format("kiln::sgd: lr must be > 0, got {}", lr));
    if (!(momentum >= 0 && momentum < 1))
      throw std::invalid_argument(fmt::format("kiln::sgd: momentum must be in [0, 1), got {}", momentum));
    if (!(weight_decay >= 0))
      throw std::invalid_argument(fmt::format("kiln::sgd: weight_decay must be >= 0, got {}", weight_decay));
    if (nesterov && momentum == 0) throw std::invalid_argument("kiln::sgd: nesterov needs momentum > 0");
  }

  /// The optimizer's per-parameter state for parameters of type T.
  template <class T>
  class state {
   public:
    explicit state(std::size_t parameters) : velocity_(parameters, T(0)) {}

    /// One update of `w` from `g` (same length as the state).
    void step(const sgd& o, std::span<T> w, std::span<const T> g, std::uint64_t t = 1) noexcept {
      prepare(o, t);
      update(o, w, g, 0);
    }

    /// What a step does once, before its updates (nothing for sgd).
    void prepare(const sgd&, std::uint64_t /*t*/) noexcept {}

    /// The update of the slice of the buffer that starts at `offset`: the
    /// replicas of replicate<N> each update their own slice, in parallel.
    void update(const sgd& o, std::span<T> w, std::span<const T> g, std::size_t offset) noexcept {
      const T lr = o.lr, mu = o.momentum, wd = o.weight_decay;
      T* v = velocity_.data() + offset;
      const std::size_t n = w.size();
      if (mu == T(0)) {
        for (std::size_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
        return;
      }
      // The velocity, then the parameters, block by block
      // (detail::update_block says why).
      if (o.nesterov) {
        detail::for_each_update_block(n, [&](std::size_t begin, std::size_t end) {
          for (std::size_t i = begin; i < end; ++i) v[i] = mu * v[i] + (g[i] + wd * w[i]);
          for (std::size_t i = begin; i < end; ++i) {
            const T d = g[i] + wd * w[i];
            w[i] -= lr * (d + mu * v[i]);
          }
        });
      } else {
        detail::for_each_update_block(n, [&](std::size_t begin, std::size_t end) {
          for (std::size_t i = begin; i < end; ++i) v[i] = mu * v[i] + g[i] + wd * w[i];
          for (std::size_t i = begin; i < end; ++i) w[i] -= lr * v[i];
        });
      }
    }

    std::span<T> buffer() noexcept { return velocity_; }
    std::span<const T> buffer() const noexcept { return velocity_; }

   private:
    std::vector<T> velocity_;
  };
};

}  // namespace kiln
