// kiln/data/dataset.hpp — samples in memory, ready for a program.
//
// WHAT IT IS
//   `dataset`: n samples of `sample_shape` real features each (row-major,
//   sample after sample), with either one class label per sample
//   (classification; several per sample for a sequence model, one per
//   position) or `target_size` real targets per sample (regression).
//
// INVARIANTS (checked by `validate()`, which readers call)
//   features.size() == size() × sample_size();
//   labels empty or a whole number of labels per sample; targets empty or
//   targets.size() == size() × target_size.
//
// The trainer reads it through `view()` (kiln/data/dataset_view.hpp); a
// dataset_view over memory of your own needs no dataset at all.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <kiln/data/dataset_view.hpp>

namespace kiln {

struct dataset {
  std::string name;                       ///< for messages ("fashion-mnist train")
  std::vector<std::size_t> sample_shape;  ///< e.g. {28, 28}
  std::vector<float> features;            ///< size() × sample_size()
  std::vector<std::uint32_t> labels;      ///< classification: labels_per_sample() per sample
  std::vector<float> targets;             ///< regression: target_size per sample
  std::size_t target_size = 0;

  std::size_t sample_size() const noexcept {
    return std::accumulate(sample_shape.begin(), sample_shape.end(), std::size_t{1}, std::multiplies<>{});
  }
  std::size_t size() const noexcept { return sample_shape.empty() ? 0 : features.size() / sample_size(); }

  std::size_t labels_per_sample() const noexcept { return size() ? labels.size() / size() : 0; }

  std::span<const float> sample(std::size_t i) const noexcept {
    return {features.data() + i * sample_size(), sample_size()};
  }

  /// Sees the same values as samples of another shape of the same size, in
  /// the same order: what a model whose input is shaped otherwise needs
  /// (`reshape({1, 28, 28})` for 28 × 28 images fed to input<1, 28, 28>).
  /// The trainer does not do this silently: shapes must match.
  void reshape(std::vector<std::size_t> shape) {
    const std::size_t n = std::accumulate(shape.begin(), shape.end(), std::size_t{1}, std::multiplies<>{});
    if (shape.empty() || n != sample_size()) {
      throw std::invalid_argument(fmt::format("kiln::dataset '{}': cannot reshape samples of {} values to {{{}}}", name,
                                              sample_size(), fmt::join(shape, ", ")));
    }
    sample_shape = std::move(shape);
  }

  void validate() const {
    detail::check_dataset_sizes("dataset", name, sample_size(), features.size(), labels.size(), targets.size(),
                                target_size);
  }

  /// The same samples as a dataset_view (no copy): what the trainer reads.
  dataset_view view() const { return {name, sample_shape, features, labels, targets, target_size}; }
};

}  // namespace kiln

#include <kiln/random.hpp>

namespace kiln {

/// Reorders the samples of `d` (with their labels and targets) by a
/// Fisher–Yates shuffle seeded with `seed`: the same seed, the same order.
inline void shuffle(dataset& d, std::uint64_t seed) {
  d.validate();
  std::vector<std::size_t> order(d.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  rng g(seed, /*stream=*/0xDA7A);
  shuffle(std::span<std::size_t>(order), g);
  const std::size_t s = d.sample_size();
  dataset out{d.name, d.sample_shape, std::vector<float>(d.features.size()), {}, {}, d.target_size};
  if (!d.labels.empty()) out.labels.resize(d.labels.size());
  if (!d.targets.empty()) out.targets.resize(d.targets.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const std::size_t from = order[i];
    std::copy_n(d.features.begin() + static_cast<std::ptrdiff_t>(from * s), s,
                out.features.begin() + static_cast<std::ptrdiff_t>(i * s));
    if (!d.labels.empty()) {
      const std::size_t l = d.labels_per_sample();
      std::copy_n(d.labels.begin() + static_cast<std::ptrdiff_t>(from * l), l,
                  out.labels.begin() + static_cast<std::ptrdiff_t>(i * l));
    }
    if (!d.targets.empty())
      std::copy_n(d.targets.begin() + static_cast<std::ptrdiff_t>(from * d.target_size), d.target_size,
                  out.targets.begin() + static_cast<std::ptrdiff_t>(i * d.target_size));
  }
  d = std::move(out);
}

}  // namespace kiln
