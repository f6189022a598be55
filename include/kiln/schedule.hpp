// kiln/schedule.hpp — learning-rate schedules.
//
// WHAT IT IS
//   A `schedule` gives the factor by which the optimizer's base learning rate
//   is multiplied at optimizer step s (0-based, counted over the whole run,
//   so a resumed run continues where it stopped) in epoch e (1-based):
//
//     constant{}                               1
//     step_decay{.every_epochs = 10, .gamma = 0.1}   γ^⌊(e − 1) / every⌋   (StepLR)
//     cosine{.steps = T, .floor = 0}           floor + (1 − floor)(1 + cos(π·min(s, T)/T))/2
//     linear_warmup{.steps = W}                (s + 1) / W for s < W, then 1
//     a >> b                                   a for a's length (its `steps`), then b,
//                                              with b's step count starting at 0
//
//   `linear_warmup{.steps = 500} >> cosine{.steps = 9500}` warms up, then
//   anneals. `reduce_on_plateau` is not a schedule of steps but of results:
//   a fit option that multiplies the rate by `factor` when the validation
//   metric has not improved for `patience` epochs.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace kiln {

/// A learning-rate factor as a function of (step, epoch).
class schedule {
 public:
  schedule() : f_([](std::size_t, std::size_t) { return 1.0; }) {}
  schedule(std::function<double(std::size_t step, std::size_t epoch)> f, std::size_t length)
      : f_(std::move(f)), length_(length) {}

  double operator()(std::size_t step, std::size_t epoch) const { return f_(step, epoch); }
  /// Steps this schedule lasts when followed by another (`>>`).
  std::size_t length() const noexcept { return length_; }

 private:
  std::function<double(std::size_t, std::size_t)> f_;
  std::size_t length_ = std::numeric_limits<std::size_t>::max();
};

struct constant {
  operator schedule() const { return {}; }
};

struct step_decay {
  std::size_t every_epochs = 10;
  double gamma = 0.1;
  operator schedule() const {
    if (every_epochs == 0) throw std::invalid_argument("kiln::step_decay: every_epochs must be at least 1");
    const auto every = every_epochs;
    const double g = gamma;
    return {[=](std::size_t, std::size_t epoch) {
              return std::pow(g, static_cast<double>((epoch == 0 ? 0 : epoch - 1) / every));
            },
            std::numeric_limits<std::size_t>::max()};
  }
};

struct cosine {
  std::size_t steps = 1;
  double floor = 0.0;  ///< the factor it ends at
  operator schedule() const {
    if (steps == 0) throw std::invalid_argument("kiln::cosine: steps must be at least 1");
    const auto total = steps;
    const double lo = floor;
    return {[=](std::size_t step, std::size_t) {
              const double x = static_cast<double>(std::min(step, total)) / static_cast<double>(total);
              return lo + (1 - lo) * (1 + std::cos(std::numbers::pi * x)) / 2;
            },
            total};
  }
};

struct linear_warmup {
  std::size_t steps = 1;
  operator schedule() const {
    if (steps == 0) throw std::invalid_argument("kiln::linear_warmup: steps must be at least 1");
    const auto total = steps;
    return {[=](std::size_t step, std::size_t) {
              return step < total ? static_cast<double>(step + 1) / static_cast<double>(total) : 1.0;
            },
            total};
  }
};

/// `a >> b`: a for a.length() steps, then b (counting its steps from 0).
inline schedule operator>>(const schedule& a, const schedule& b) {
  const std::size_t cut = a.length();
  const std::size_t length = b.length() == std::numeric_limits<std::size_t>::max() ? b.length() : cut + b.length();
  return {[=](std::size_t step, std::size_t epoch) { return step < cut ? a(step, epoch) : b(step - cut, epoch); },
          length};
}
template <class A, class B>
requires(std::is_convertible_v<A, schedule>&& std::is_convertible_v<B, schedule> &&
         !(std::is_same_v<A, schedule> && std::is_same_v<B, schedule>)) schedule
operator>>(const A& a, const B& b) {
  return schedule(a) >> schedule(b);
}

/// Which validation number a plateau, an early stop or keep_best watches.
/// Loss, MSE and MAE improve downwards, the others upwards.
/// val_top_k_accuracy needs fit_options::metrics.top_k, val_macro_f1
/// metrics.per_class; val_mse, val_mae and val_r2 are a regression's.
enum class monitor { val_loss, val_accuracy, val_top_k_accuracy, val_macro_f1, val_mse, val_mae, val_r2 };

/// Multiply the rate by `factor` when `metric` has not improved by more than
/// `min_delta` for `patience` epochs; never below `min_factor`.
struct reduce_on_plateau {
  kiln::monitor metric = monitor::val_loss;
  double factor = 0.1;
  std::size_t patience = 3;
  double min_delta = 1e-4;
  double min_factor = 0.0;
};

/// Stop training when `metric` has not improved by more than `min_delta`
/// for `patience` epochs; then put back the parameters of the best epoch
/// unless `restore_best` is false.
struct early_stopping {
  kiln::monitor metric = monitor::val_loss;
  std::size_t patience = 3;
  double min_delta = 1e-4;
  bool restore_best = true;
};

}  // namespace kiln
