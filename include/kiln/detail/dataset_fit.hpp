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
//
// The trainer reads any kiln::sample_source (kiln/data/sample_source.hpp);
// a dataset through its view. `batch_reader` gathers one batch row by row.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <vector>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <kiln/data/dataset.hpp>
#include <kiln/data/dataset_view.hpp>
#include <kiln/data/sample_source.hpp>
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

/// What the trainer reads: a dataset through its view (no copy of the
/// samples), any other sample_source as it is.
inline dataset_view as_source(const dataset& d) { return d.view(); }
template <sample_source S>
const S& as_source(const S& s) noexcept {
  return s;
}
/// What fit, evaluate and predict accept: a dataset or a sample_source.
template <class D>
concept trainer_data = std::same_as<D, dataset> || sample_source<D>;

/// The samples of d fit Program's input (its role: "training set", ...).
template <class Program, sample_source S>
void check_features(const S& src, const char* role) {
  if constexpr (requires { src.validate(); }) src.validate();
  const source_info d = src.info();
  std::size_t sample_size = 1;
  for (std::size_t e : d.sample_shape) sample_size *= e;
  if (d.sample_shape.empty() || sample_size != Program::input_size) {
    throw std::invalid_argument(
        fmt::format("kiln::trainer: the {} '{}' has samples of {} values, but the model's "
                    "input {} takes {}",
                    role, d.name, d.sample_shape.empty() ? 0 : sample_size,
                    to_string(typename Program::model_type::input_shape_type{}), Program::input_size));
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
/// Program's loss takes targets that a dataset gives (checked once per
/// program, whatever the sources it is fitted on: one error).
template <class Program>
struct loss_targets_check {
  static constexpr bool passed = [] {
    static_assert(diagnostics::a_dataset_gives_uint32_class_labels_or_float_targets<typename Program::loss_type,
                                                                                     typename Program::target_type>,
                  "kiln::trainer: a dataset gives class labels as std::uint32_t (dataset::labels) and real targets "
                  "as float (dataset::targets); declare the loss's target_type as std::uint32_t, float or double "
                  "(another type would take them by a silent conversion)");
    return true;
  }();
};
/// All of d fits Program: its samples, and its labels or targets.
template <class Program, sample_source S>
void check_dataset(const S& src, const char* role) {
  using target_type = typename Program::target_type;
  static_assert(loss_targets_check<Program>::passed || true);  // (it reports, once)
  check_features<Program>(src, role);
  const source_info d = src.info();
  constexpr std::size_t tps = Program::targets_per_sample;
  if constexpr (std::is_same_v<target_type, std::uint32_t>) {
    if (d.labels_per_sample == 0 && d.target_size != 0)
      throw std::invalid_argument(fmt::format(
          "kiln::trainer: the {} '{}' has real targets (dataset::targets), but {} scores class labels: give "
          "dataset::labels, {} per sample, or use a loss for real targets (kiln::mse)",
          role, d.name, Program::loss_type::name(), tps));
    if (d.labels_per_sample != tps)
      throw std::invalid_argument(fmt::format(
          "kiln::trainer: the {} '{}' has {} class labels for {} samples; {} "
          "needs {} per sample",
          role, d.name, d.labels_per_sample * d.samples, d.samples, Program::loss_type::name(), tps));
    // Every label in range, checked before the first step: the message
    // names the sample in the dataset, not a position in some batch.
    if constexpr (requires { Program::bound_loss::class_count; }) {
      constexpr std::size_t classes = Program::bound_loss::class_count;
      std::array<std::uint32_t, tps> labels;
      for (std::size_t i = 0; i < d.samples; ++i) {
        src.read_labels(i, std::span<std::uint32_t>(labels));
        const auto bad = std::find_if(labels.begin(), labels.end(), [](std::uint32_t l) { return l >= classes; });
        if (bad != labels.end())
          throw std::invalid_argument(fmt::format(
              "kiln::trainer: the {} '{}': sample {} has label {}, but {} scores {} classes (labels 0 to {})", role,
              d.name, i, *bad, Program::loss_type::name(), classes, classes - 1));
      }
    }
  } else {
    if (d.target_size == 0 && d.labels_per_sample != 0)
      throw std::invalid_argument(fmt::format(
          "kiln::trainer: the {} '{}' has class labels (dataset::labels), but {} compares real targets: give "
          "dataset::targets with target_size = {}, or use a loss for class labels (kiln::softmax_cross_entropy<>)",
          role, d.name, Program::loss_type::name(), tps));
    if (d.target_size != tps)
      throw std::invalid_argument(fmt::format("kiln::trainer: the {} '{}' has {} targets per sample; {} needs {}",
                                              role, d.name, d.target_size, Program::loss_type::name(), tps));
  }
}

template <class Program>
void check_features(const dataset& d, const char* role) {
  check_features<Program>(d.view(), role);
}
template <class Program>
void check_dataset(const dataset& d, const char* role) {
  check_dataset<Program>(d.view(), role);
}

/// Gathers batches from a sample_source into a program's input and a
/// target buffer, row by row. Rows go straight into the input when it holds
/// float; otherwise through one row of floats allocated here, once (so a
/// step still allocates nothing).
template <class Program>
class batch_reader {
 public:
  using scalar = typename Program::scalar_type;
  using target_type = typename Program::target_type;
  static constexpr std::size_t in = Program::input_size, tps = Program::targets_per_sample;

  /// Copies samples `pick` into `x` (zeros after `valid`) and, unless
  /// `targets` is empty, their labels or targets into it.
  template <sample_source S>
  void gather(const S& src, std::span<const std::size_t> pick, std::size_t valid, const sample_pass& pass,
              std::span<scalar> x, std::span<target_type> targets) {
    for (std::size_t i = 0; i < valid; ++i) {
      const auto row = x.subspan(i * in, in);
      if constexpr (std::is_same_v<scalar, float>) {
        src.read_features(pick[i], pass, row);
      } else {
        src.read_features(pick[i], pass, std::span<float>(row_));
        std::copy(row_.begin(), row_.end(), row.begin());
      }
    }
    std::fill(x.begin() + static_cast<std::ptrdiff_t>(valid * in), x.end(), scalar(0));
    if (targets.empty()) return;
    for (std::size_t i = 0; i < valid; ++i) {
      const auto out = targets.subspan(i * tps, tps);
      if constexpr (std::is_same_v<target_type, std::uint32_t> || std::is_same_v<target_type, float>) {
        if constexpr (std::is_same_v<target_type, std::uint32_t>)
          src.read_labels(pick[i], out);
        else
          src.read_targets(pick[i], out);
      } else if constexpr (dataset_target<target_type>) {  // double (else a compile error, in check_dataset)
        src.read_targets(pick[i], std::span<float>(targets_));
        std::copy(targets_.begin(), targets_.end(), out.begin());
      }
    }
    std::fill(targets.begin() + static_cast<std::ptrdiff_t>(valid * tps), targets.end(), target_type{});
  }

 private:
  std::vector<float> row_ = std::vector<float>(std::is_same_v<scalar, float> ? 0 : in);
  std::vector<float> targets_ = std::vector<float>(std::is_same_v<target_type, double> ? tps : 0);
};

}  // namespace kiln::detail
