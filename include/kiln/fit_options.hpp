// kiln/fit_options.hpp — what trainer::fit takes and what it reports: the
// number of epochs, fit_options (validation, seed, metrics, schedule,
// plateau, early stopping, the best checkpoint, clipping, checkpoints,
// progress, callbacks), the metrics of each epoch and their text and
// JSON-lines forms, and training_error.
//
// `epochs{n}` is n MORE epochs: a fit continues the run's count (after an
// earlier fit, a load, or an early stop), and an epoch that stop() cut short
// counts as one of the n when the next fit finishes it.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <kiln/data/dataset.hpp>
#include <kiln/data/source_ref.hpp>
#include <kiln/metrics.hpp>
#include <kiln/sampler.hpp>
#include <kiln/schedule.hpp>

namespace kiln {

/// How many more passes over the training set: `epochs{10}` (counted on
/// from the epochs already done; see the top of this file).
struct epochs {
  std::size_t count = 1;
};

/// Where progress goes: `automatic` is a live bar on a terminal and one line
/// per epoch otherwise.
enum class progress_mode { automatic, bar, lines, none };

/// What a step-end callback hears.
struct step_report {
  std::size_t epoch = 0;  ///< 1-based, over the whole run
  std::size_t step_in_epoch = 0;
  std::size_t step = 0;  ///< optimizer steps done, over the whole run
  double loss = 0;
  double lr = 0;  ///< the rate this step used
};

struct epoch_metrics;

/// Save a checkpoint (trainer::save, atomically) to `file` after each epoch
/// whose validation `metric` is the best so far.
struct best_checkpoint {
  std::filesystem::path file{};
  kiln::monitor metric = monitor::val_loss;
};

struct fit_options {
  /// Scored after each epoch: `&test` for a dataset, a dataset_view, a
  /// streamed_dataset or any sample_source (kiln/data/source_ref.hpp); it
  /// must outlive the fit.
  source_ref validation = {};
  std::uint64_t seed = 0;
  bool shuffle = true;
  kiln::remainder remainder = remainder::drop;
  progress_mode progress = progress_mode::automatic;
  std::filesystem::path metrics_log{};  ///< JSON lines, one per epoch (empty: none)
  /// Metrics of the validation set besides loss and accuracy (kiln/metrics.hpp).
  metric_options metrics{};
  std::FILE* output = stdout;
  /// When set, a checkpoint is written there after every epoch
  /// (epoch-0001.kiln, ...), atomically, keeping the newest `keep_checkpoints`.
  std::filesystem::path checkpoint_dir{};
  std::size_t keep_checkpoints = 3;
  /// The learning rate at each step: the optimizer's lr × this factor
  /// (kiln/schedule.hpp: step_decay, cosine, linear_warmup, a >> b).
  kiln::schedule schedule{};
  std::optional<reduce_on_plateau> plateau{};
  std::optional<early_stopping> early_stop{};
  /// Plateau, early stop and keep_best share one record of the best value
  /// (a checkpoint saves it): when several are given, they watch one metric.
  std::optional<best_checkpoint> keep_best{};
  /// Clip the gradient to this global L2 norm before each update (0: off).
  double clip_grad_norm = 0;
  /// Your hooks. Call trainer::stop() from one to end fit after that step.
  std::function<void(const step_report&)> on_step_end{};
  std::function<void(const epoch_metrics&)> on_epoch_end{};
};

struct evaluation {
  double loss = 0;
  double accuracy = std::numeric_limits<double>::quiet_NaN();  ///< NaN for regression
  std::size_t samples = 0;
  metric_options asked{};  ///< the classification metrics asked for
  /// Counts over every prediction, when any of `asked` is on.
  std::optional<classification_metrics> classification{};
  /// MSE, MAE and R², for a loss of real targets (one per model output).
  std::optional<regression_metrics> regression{};

  double top_k_accuracy() const noexcept {
    return classification && asked.top_k > 1 ? classification->top_k_accuracy(asked.top_k)
                                             : std::numeric_limits<double>::quiet_NaN();
  }
};

struct epoch_metrics {
  std::size_t epoch = 0;
  std::size_t steps = 0;
  evaluation train;
  std::optional<evaluation> validation;
  double seconds = 0;
  double samples_per_second = 0;
  double lr = 0;            ///< the rate of the epoch's last step
  bool lr_reduced = false;  ///< reduce_on_plateau lowered the rate after this epoch
  bool best = false;        ///< the watched metric is the best so far (plateau, early stop, keep_best)
};

struct fit_history {
  std::vector<epoch_metrics> epochs;
  bool stopped_early = false;  ///< early_stopping ended the run
  /// The epoch whose watched metric was the best (0: none watched, or
  /// unknown) and that value; whether early stopping put its parameters back.
  std::size_t best_epoch = 0;
  double best_value = std::numeric_limits<double>::quiet_NaN();
  bool restored_best = false;
  std::string stop_reason{};  ///< why early stopping ended the run, in words
};

/// Training stopped because something went wrong in the numbers.
class training_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

inline std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : "null"; }

/// The name a metric has in the log: val_loss, val_top5_accuracy, ...
inline std::string monitor_name(monitor m, std::size_t top_k = 0) {
  switch (m) {
    case monitor::val_loss: return "val_loss";
    case monitor::val_accuracy: return "val_accuracy";
    case monitor::val_top_k_accuracy: return fmt::format("val_top{}_accuracy", top_k);
    case monitor::val_macro_f1: return "val_macro_f1";
    case monitor::val_mse: return "val_mse";
    case monitor::val_mae: return "val_mae";
    case monitor::val_r2: return "val_r2";
  }
  return "?";
}
inline bool lower_is_better(monitor m) {
  return m == monitor::val_loss || m == monitor::val_mse || m == monitor::val_mae;
}
/// The watched value of a validation (NaN when it was not computed).
inline double monitored(monitor m, const evaluation& e) {
  constexpr double none = std::numeric_limits<double>::quiet_NaN();
  const auto& c = e.classification;
  const auto& r = e.regression;
  switch (m) {
    case monitor::val_loss: return e.loss;
    case monitor::val_accuracy: return e.accuracy;
    case monitor::val_top_k_accuracy: return e.top_k_accuracy();
    case monitor::val_macro_f1: return c && e.asked.per_class ? c->macro_f1() : none;
    case monitor::val_mse: return r ? r->mse() : none;
    case monitor::val_mae: return r ? r->mae() : none;
    case monitor::val_r2: return r ? r->r2() : none;
  }
  return none;
}

template <class F>
std::string json_array(std::size_t n, F&& at) {
  std::string s = "[";
  for (std::size_t i = 0; i < n; ++i) {
    if (i) s += ',';
    s += at(i);
  }
  return s + "]";
}

/// The metrics of `e` beyond loss and accuracy, as JSON members after a comma.
inline std::string metrics_json(const evaluation& e, std::string_view prefix) {
  std::string s;
  if (const auto& c = e.classification) {
    if (e.asked.top_k > 1)
      s += fmt::format(R"(,"{}top{}_accuracy":{})", prefix, e.asked.top_k, json_number(e.top_k_accuracy()));
    if (e.asked.per_class) {
      s += fmt::format(R"(,"{0}macro_precision":{1},"{0}macro_recall":{2},"{0}macro_f1":{3})", prefix,
                       json_number(c->macro_precision()), json_number(c->macro_recall()),
                       json_number(c->macro_f1()));
      const std::size_t n = c->classes();
      s += fmt::format(R"(,"{0}precision":{1},"{0}recall":{2},"{0}f1":{3},"{0}support":{4})", prefix,
                       json_array(n, [&](std::size_t i) { return json_number(c->precision(i)); }),
                       json_array(n, [&](std::size_t i) { return json_number(c->recall(i)); }),
                       json_array(n, [&](std::size_t i) { return json_number(c->f1(i)); }),
                       json_array(n, [&](std::size_t i) { return std::to_string(c->support(i)); }));
    }
    if (e.asked.confusion) {
      const std::size_t n = c->classes();
      s += fmt::format(R"(,"{}confusion":{})", prefix, json_array(n, [&](std::size_t row) {
                         return json_array(n, [&](std::size_t col) { return std::to_string(c->confusion(row, col)); });
                       }));
    }
  }
  if (const auto& r = e.regression) {
    s += fmt::format(R"(,"{0}mse":{1},"{0}mae":{2},"{0}r2":{3})", prefix, json_number(r->mse()),
                     json_number(r->mae()), json_number(r->r2()));
  }
  return s;
}

inline std::string to_json(const epoch_metrics& m) {
  std::string s = fmt::format(R"({{"epoch":{},"steps":{},"train_loss":{},"train_accuracy":{})", m.epoch, m.steps,
                              json_number(m.train.loss), json_number(m.train.accuracy));
  if (m.validation) {
    s += fmt::format(R"(,"val_loss":{},"val_accuracy":{})", json_number(m.validation->loss),
                     json_number(m.validation->accuracy));
    s += metrics_json(*m.validation, "val_");
  }
  if (m.best) s += R"(,"best":true)";
  s += fmt::format(R"(,"lr":{},"seconds":{},"samples_per_second":{}}})", json_number(m.lr), json_number(m.seconds),
                   json_number(m.samples_per_second));
  return s;
}
inline std::string describe(const epoch_metrics& m, std::size_t of) {
  std::string s = fmt::format("epoch {}/{}: loss {:.4f}", m.epoch, of, m.train.loss);
  if (std::isfinite(m.train.accuracy)) s += fmt::format(", accuracy {:.4f}", m.train.accuracy);
  if (const auto& v = m.validation) {
    s += fmt::format(", val_loss {:.4f}", v->loss);
    if (std::isfinite(v->accuracy)) s += fmt::format(", val_accuracy {:.4f}", v->accuracy);
    if (v->asked.top_k > 1) s += fmt::format(", val_top{} {:.4f}", v->asked.top_k, v->top_k_accuracy());
    if (v->classification && v->asked.per_class) s += fmt::format(", val_macro_f1 {:.4f}", v->classification->macro_f1());
    if (v->regression) s += fmt::format(", val_mae {:.4g}, val_r2 {:.4f}", v->regression->mae(), v->regression->r2());
  }
  return s + fmt::format(", {:.1f} s, {:.0f} samples/s", m.seconds, m.samples_per_second);
}

}  // namespace detail

}  // namespace kiln
