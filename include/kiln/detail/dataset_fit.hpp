// kiln/detail/dataset_fit.hpp — whether a dataset fits a program, checked
// before the first step: samples of the model's input shape (the same size
// is not enough), labels or targets as the loss needs them, every label in
// the loss's range. A misfit is std::invalid_argument naming the dataset,
// its role and, for a label, the sample.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/data/dataset.hpp>
#include <kiln/shape.hpp>

namespace kiln::detail {

/// The samples of d fit Program's input (its role: "training set", ...).
template <class Program>
void check_features(const dataset& d, const char* role) {
  d.validate();
  if (d.sample_size() != Program::input_size) {
    throw std::invalid_argument(
        fmt::format("kiln::trainer: the {} '{}' has samples of {} values, but the model's "
                    "input {} takes {}",
                    role, d.name, d.sample_size(), to_string(typename Program::model_type::input_shape_type{}),
                    Program::input_size));
  }
  // The same size is not enough: {784} samples are not input<28, 28>'s.
  constexpr auto extents = Program::model_type::input_shape_type::extents;
  if (!std::equal(d.sample_shape.begin(), d.sample_shape.end(), extents.begin(), extents.end())) {
    throw std::invalid_argument(fmt::format(
        "kiln::trainer: the {} '{}' has samples of shape {{{}}}, but the model's input is {}; if the same values "
        "in the same order are meant, say so with dataset::reshape({{{}}})",
        role, d.name, fmt::join(d.sample_shape, ", "), to_string(typename Program::model_type::input_shape_type{}),
        fmt::join(extents, ", ")));
  }
}
/// All of d fits Program: its samples, and its labels or targets.
template <class Program>
void check_dataset(const dataset& d, const char* role) {
  using target_type = typename Program::target_type;
  check_features<Program>(d, role);
  if constexpr (std::is_same_v<target_type, std::uint32_t>) {
    if (d.labels.size() != d.size() * Program::targets_per_sample)
      throw std::invalid_argument(fmt::format(
          "kiln::trainer: the {} '{}' has {} class labels for {} samples; {} "
          "needs {} per sample",
          role, d.name, d.labels.size(), d.size(), Program::loss_type::name(), Program::targets_per_sample));
    // Every label in range, checked before the first step: the message
    // names the sample in the dataset, not a position in some batch.
    if constexpr (requires { Program::bound_loss::class_count; }) {
      constexpr std::size_t classes = Program::bound_loss::class_count;
      const auto bad = std::find_if(d.labels.begin(), d.labels.end(), [](std::uint32_t l) { return l >= classes; });
      if (bad != d.labels.end()) {
        const std::size_t at = static_cast<std::size_t>(bad - d.labels.begin());
        throw std::invalid_argument(fmt::format(
            "kiln::trainer: the {} '{}': sample {} has label {}, but {} scores {} classes (labels 0 to {})", role,
            d.name, at / Program::targets_per_sample, *bad, Program::loss_type::name(), classes, classes - 1));
      }
    }
  } else {
    if (d.target_size != Program::targets_per_sample || d.targets.size() != d.size() * d.target_size)
      throw std::invalid_argument(fmt::format("kiln::trainer: the {} '{}' has {} targets per sample; {} needs {}",
                                              role, d.name, d.target_size, Program::loss_type::name(),
                                              Program::targets_per_sample));
  }
}

}  // namespace kiln::detail
