// kiln/losses/softmax_cross_entropy.hpp — classification loss.
//
// WHAT IT COMPUTES
//   For logits z (one column per sample) and a class label t:
//     loss = −log softmax(z)_t = logsumexp(z) − z_t     (stable: max subtracted)
//   averaged over the samples that count (`valid`; padding rows are ignored).
//   Gradient w.r.t. z: (softmax(z) − onehot(t)) / valid.
//   For a sequence output shape<L, C> each of the L rows is one such
//   classification (L labels per sample) and the mean is over all L·valid.
//
// SHAPE CONTRACT
//   model output shape<C> (one std::uint32_t label per sample) or
//   shape<L, C> (L labels per sample).
//   `softmax_cross_entropy<C>` states the class count, and it must equal the
//   model's output size; `softmax_cross_entropy<>` takes it from the model.
//
// ERRORS
//   A label ≥ C throws std::out_of_range naming the sample and the label.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <fmt/format.h>

#include <kiln/detail/libm_expf.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class Loss, class ModelOutputShape>
inline constexpr bool loss_class_count_must_equal_model_output_size =
    Loss::classes == 0 || Loss::classes == ModelOutputShape::extent(ModelOutputShape::rank - 1);
template <class Loss, class ModelOutputShape>
inline constexpr bool softmax_cross_entropy_needs_a_rank_1_or_2_output =
    ModelOutputShape::rank == 1 || ModelOutputShape::rank == 2;
}  // namespace diagnostics

/// What a loss evaluation returns: the mean loss over the samples that
/// counted, how many there were, how many predictions they made (samples ×
/// positions for a sequence) and how many of those were right.
struct loss_value {
  double loss = 0;
  std::size_t samples = 0;
  std::size_t correct = 0;
  std::size_t predictions = 0;
};

template <std::size_t Classes>
struct softmax_cross_entropy {
  using kiln_loss = void;
  static constexpr std::size_t classes = Classes;
  static std::string name() {
    return Classes == 0 ? "softmax_cross_entropy<>" : fmt::format("softmax_cross_entropy<{}>", Classes);
  }

  template <Shape Out>
  struct bind {
    static_assert(diagnostics::softmax_cross_entropy_needs_a_rank_1_or_2_output<softmax_cross_entropy, Out>,
                  "kiln::softmax_cross_entropy: the model's output must be class scores, shape<C> or shape<L, C>");
    static_assert(diagnostics::loss_class_count_must_equal_model_output_size<softmax_cross_entropy, Out>,
                  "kiln::softmax_cross_entropy<C>: C must equal the size of the model's output");

    static constexpr std::size_t class_count = Out::extent(Out::rank - 1);
    static constexpr std::size_t positions = Out::size / class_count;
    using target_type = std::uint32_t;
    static constexpr std::size_t targets_per_sample = positions;
    static constexpr bool has_accuracy = true;

    /// Loss over the first `valid` of `batch` columns of `z`; when `dz` is
    /// not null it receives d(mean loss)/dz for every column (0 for padding).
    template <class T>
    static loss_value evaluate(const T* z, const target_type* labels, std::size_t batch_samples,
                               std::size_t valid_samples, T* dz) {
      const std::size_t batch = batch_samples * positions, valid = valid_samples * positions;
      loss_value r{0, valid_samples, 0, valid};
      double sum = 0;
      const T inv = valid ? T(1) / static_cast<T>(valid) : T(0);
      for (std::size_t s = 0; s < batch; ++s) {
        const T* col = z + s * class_count;
        T* dcol = dz ? dz + s * class_count : nullptr;
        if (s >= valid) {
          if (dcol) std::fill(dcol, dcol + class_count, T(0));
          continue;
        }
        const std::uint32_t t = labels[s];
        if (t >= class_count) {
          throw std::out_of_range(
              positions == 1
                  ? fmt::format("kiln::softmax_cross_entropy: label {} of sample {} of the batch is out of range: the "
                                "model has {} classes",
                                t, s, class_count)
                  : fmt::format("kiln::softmax_cross_entropy: label {} at position {} of sample {} of the batch is "
                                "out of range: the model has {} classes",
                                t, s % positions, s / positions, class_count));
        }
        const std::size_t argmax = static_cast<std::size_t>(std::max_element(col, col + class_count) - col);
        const T m = col[argmax];
        // f32: glibc's expf, bit for bit, 8 classes at a time with AVX-512, 4 with AVX2 + FMA or (in a
        // baseline build) on a CPU with FMA or with neither FMA nor FMA4, else one
        // (detail/libm_expf.hpp); f64: std::exp
        constexpr bool f32 = std::is_same_v<T, float>;
        T denom = 0;
        if constexpr (f32) {
          denom = detail::libm_expf::sum_exp_shifted(col, m, class_count);
        } else {
          for (std::size_t c = 0; c < class_count; ++c) denom += std::exp(col[c] - m);
        }
        const T log_denom = std::log(denom);  // (one per row)
        sum += static_cast<double>(log_denom - (col[t] - m));
        r.correct += argmax == t;
        if (dcol) {
          if constexpr (f32) {
            detail::libm_expf::exp_shifted(col, m, log_denom, inv, dcol, class_count);
          } else {
            for (std::size_t c = 0; c < class_count; ++c) dcol[c] = std::exp(col[c] - m - log_denom) * inv;
          }
          dcol[t] -= inv;
        }
      }
      r.loss = valid ? sum / static_cast<double>(valid) : 0.0;
      return r;
    }
  };
};

}  // namespace kiln
