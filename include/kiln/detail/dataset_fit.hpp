// kiln/detail/dataset_fit.hpp — whether a dataset fits a program, checked
// before the first step: samples of the model's input shape (the same size
// is not enough), labels or targets as the loss needs them, every label in
// the loss's range. A misfit is std::invalid_argument naming the dataset,
// its role and, for a label, the sample; labels given for a loss of real
// targets, or targets for a loss of labels, are told so with what to give.
//
// A dataset holds class labels as std::uint32_t (`labels`) and real targets
// as float (`targets`): a loss whose target_type is std::uint32_t is given
// the labels, one whose target_type is float or double the targets (a float
// widens to double exactly). Any other target_type would be filled by a
// silent conversion (an int label from 2.7f is 2): it is one compile error,
// naming the loss and the type, where fit or evaluate is called.
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

namespace kiln::diagnostics {
template <class Loss, class TargetType>
inline constexpr bool a_dataset_gives_uint32_class_labels_or_float_targets =
    std::is_same_v<TargetType, std::uint32_t> || std::is_same_v<TargetType, float> ||
    std::is_same_v<TargetType, double>;
}  // namespace kiln::diagnostics

namespace kiln::detail {

/// A dataset can give a loss targets of type T: its labels (std::uint32_t)
/// or its targets (float, or double: a float widens exactly).
template <class T>
concept dataset_target = std::is_same_v<T, std::uint32_t> || std::is_same_v<T, float> || std::is_same_v<T, double>;

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
  static_assert(
      diagnostics::a_dataset_gives_uint32_class_labels_or_float_targets<typename Program::loss_type, target_type>,
      "kiln::trainer: a dataset gives class labels as std::uint32_t (dataset::labels) and real targets as float "
      "(dataset::targets); declare the loss's target_type as std::uint32_t, float or double (another type would "
      "take them by a silent conversion)");
  check_features<Program>(d, role);
  if constexpr (std::is_same_v<target_type, std::uint32_t>) {
    if (d.labels.empty() && !d.targets.empty())
      throw std::invalid_argument(fmt::format(
          "kiln::trainer: the {} '{}' has real targets (dataset::targets), but {} scores class labels: give "
          "dataset::labels, {} per sample, or use a loss for real targets (kiln::mse)",
          role, d.name, Program::loss_type::name(), Program::targets_per_sample));
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
    if (d.targets.empty() && !d.labels.empty())
      throw std::invalid_argument(fmt::format(
          "kiln::trainer: the {} '{}' has class labels (dataset::labels), but {} compares real targets: give "
          "dataset::targets with target_size = {}, or use a loss for class labels (kiln::softmax_cross_entropy<>)",
          role, d.name, Program::loss_type::name(), Program::targets_per_sample));
    if (d.target_size != Program::targets_per_sample || d.targets.size() != d.size() * d.target_size)
      throw std::invalid_argument(fmt::format("kiln::trainer: the {} '{}' has {} targets per sample; {} needs {}",
                                              role, d.name, d.target_size, Program::loss_type::name(),
                                              Program::targets_per_sample));
  }
}

}  // namespace kiln::detail
