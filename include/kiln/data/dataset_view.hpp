// kiln/data/dataset_view.hpp — samples in the user's own memory, no copy.
//
// WHAT IT IS
//   `dataset_view`: n samples of `sample_shape` floats each, row-major,
//   sample after sample, in memory the user owns (a std::vector, an array,
//   a memory-mapped file, another library's buffer), seen through
//   std::spans; with one or more class labels per sample (classification)
//   or `target_size` real targets per sample (regression). The first way
//   to bring data to a trainer:
//
//     std::vector<float> x = ...;            // n × 64 features
//     std::vector<std::uint32_t> y = ...;    // n labels
//     kiln::dataset_view train{.name = "mine", .sample_shape = {64}, .features = x, .labels = y};
//     t.fit(train, epochs{10});
//
//   A `dataset` (kiln/data/dataset.hpp) is seen the same way: `d.view()`.
//
// INVARIANTS (checked by `validate()`, which the trainer calls)
//   features.size() is a whole number of samples; labels empty or a whole
//   number per sample; targets empty or size() × target_size values.
//   The memory must outlive the view and not change during a step.
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
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <kiln/data/sample_source.hpp>

namespace kiln {

namespace detail {
/// The checks dataset and dataset_view share; `kind` names which one.
inline void check_dataset_sizes(std::string_view kind, std::string_view name, std::size_t sample_size,
                                std::size_t features, std::size_t labels, std::size_t targets,
                                std::size_t target_size) {
  if (sample_size == 0 || features % sample_size != 0)
    throw std::invalid_argument(fmt::format("kiln::{} '{}': {} feature values do not divide into samples of {}",
                                            kind, name, features, sample_size));
  const std::size_t n = features / sample_size;
  if (labels != 0 && (n == 0 || labels % n != 0))
    throw std::invalid_argument(fmt::format("kiln::{} '{}': {} labels for {} samples", kind, name, labels, n));
  if (targets != 0 && targets != n * target_size)
    throw std::invalid_argument(fmt::format("kiln::{} '{}': {} target values for {} samples of {} targets", kind,
                                            name, targets, n, target_size));
}
}  // namespace detail

struct dataset_view {
  std::string name = {};                       ///< for messages
  std::vector<std::size_t> sample_shape = {};  ///< e.g. {8, 8}
  std::span<const float> features = {};        ///< size() × sample_size(), not copied
  std::span<const std::uint32_t> labels = {};  ///< classification: labels_per_sample() per sample
  std::span<const float> targets = {};         ///< regression: target_size per sample
  std::size_t target_size = 0;

  std::size_t sample_size() const noexcept {
    return std::accumulate(sample_shape.begin(), sample_shape.end(), std::size_t{1}, std::multiplies<>{});
  }
  std::size_t size() const noexcept { return sample_shape.empty() ? 0 : features.size() / sample_size(); }
  std::size_t labels_per_sample() const noexcept { return size() ? labels.size() / size() : 0; }

  void validate() const {
    detail::check_dataset_sizes("dataset_view", name, sample_shape.empty() ? 0 : sample_size(), features.size(),
                                labels.size(), targets.size(), target_size);
  }

  // ---- sample_source --------------------------------------------------------
  source_info info() const noexcept {
    return {name, sample_shape, size(), labels_per_sample(), targets.empty() ? 0 : target_size};
  }
  void read_features(std::size_t i, const sample_pass&, std::span<float> row) const {
    std::copy_n(features.begin() + static_cast<std::ptrdiff_t>(i * row.size()), row.size(), row.begin());
  }
  void read_labels(std::size_t i, std::span<std::uint32_t> out) const {
    std::copy_n(labels.begin() + static_cast<std::ptrdiff_t>(i * out.size()), out.size(), out.begin());
  }
  void read_targets(std::size_t i, std::span<float> out) const {
    std::copy_n(targets.begin() + static_cast<std::ptrdiff_t>(i * out.size()), out.size(), out.begin());
  }
};

static_assert(sample_source<dataset_view>);

}  // namespace kiln
