// kiln/losses/mse.hpp — mean squared error.
//
// WHAT IT COMPUTES
//   loss = mean over every output element of the samples that count of
//   (y − t)²  (PyTorch's MSELoss with reduction='mean'); gradient 2(y − t)/n,
//   n = valid samples × output size.
//
// SHAPE CONTRACT
//   any model output shape S; targets are S::size reals per sample.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>

#include <kiln/losses/softmax_cross_entropy.hpp>
#include <kiln/shape.hpp>

namespace kiln {

struct mse {
  using kiln_loss = void;
  static constexpr std::size_t classes = 0;
  static std::string name() { return "mse"; }

  template <Shape Out>
  struct bind {
    using target_type = float;
    static constexpr std::size_t targets_per_sample = Out::size;
    static constexpr bool has_accuracy = false;

    template <class T>
    static loss_value evaluate(const T* y, const target_type* t, std::size_t batch, std::size_t valid, T* dy) {
      constexpr std::size_t n = Out::size;
      const T scale = valid ? T(2) / static_cast<T>(valid * n) : T(0);
      double sum = 0;
      for (std::size_t i = 0; i < batch * n; ++i) {
        if (i >= valid * n) {
          if (dy) dy[i] = T(0);
          continue;
        }
        const T d = y[i] - static_cast<T>(t[i]);
        sum += static_cast<double>(d) * static_cast<double>(d);
        if (dy) dy[i] = scale * d;
      }
      return {valid ? sum / static_cast<double>(valid * n) : 0.0, valid, 0, valid};
    }
  };
};

}  // namespace kiln
