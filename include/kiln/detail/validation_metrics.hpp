// kiln/detail/validation_metrics.hpp — the metrics trainer::evaluate adds
// to the loss: which accumulators a program's loss gets, and feeding them a
// batch.
//
// WHAT IT DOES
//   start_metrics   a classifier (class labels, a loss with accuracy) gets a
//                   classification_metrics of output_size / targets_per_sample
//                   classes when any classification metric is asked; a loss
//                   of real targets, one per output, gets a
//                   regression_metrics of that many outputs, always.
//   add_metrics     the first `valid` samples of the last forward's output
//                   against their targets (a sequence model's positions are
//                   predictions each). Allocates nothing.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include <kiln/fit_options.hpp>
#include <kiln/metrics.hpp>

namespace kiln::detail {

template <class Program>
inline constexpr bool is_classifier = std::is_same_v<typename Program::target_type, std::uint32_t> &&
                                      Program::bound_loss::has_accuracy &&
                                      Program::output_size % Program::targets_per_sample == 0;
template <class Program>
inline constexpr bool is_regression = (std::is_same_v<typename Program::target_type, float> ||
                                       std::is_same_v<typename Program::target_type, double>) &&
                                      Program::output_size == Program::targets_per_sample;

template <class Program>
void start_metrics(evaluation& ev, const metric_options& asked) {
  if constexpr (is_classifier<Program>) {
    ev.asked = asked;
    if (asked.any()) ev.classification.emplace(Program::output_size / Program::targets_per_sample);
  } else if constexpr (is_regression<Program>) {
    ev.regression.emplace(Program::output_size);
  }
}

template <class Program, class T, class Target>
void add_metrics(evaluation& ev, std::span<const T> output, std::span<const Target> targets, std::size_t valid) {
  constexpr std::size_t out = Program::output_size, tps = Program::targets_per_sample;
  if constexpr (is_classifier<Program>) {
    if (ev.classification) ev.classification->add(output.first(valid * out), targets.first(valid * tps));
  } else if constexpr (is_regression<Program>) {
    ev.regression->add(output.first(valid * out), targets.first(valid * tps));
  }
}

}  // namespace kiln::detail
