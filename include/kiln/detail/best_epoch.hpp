// kiln/detail/best_epoch.hpp — what fit keeps of its best epoch.
//
// WHAT IT IS
//   watched_metric  the one validation metric that reduce_on_plateau,
//                   early_stopping and keep_best watch: they share one record
//                   of the best value (saved in checkpoints), so when several
//                   are given they must name the same metric, and it must be
//                   one this validation computes; else std::invalid_argument.
//   best_snapshot   the parameters and state values (batch_norm's running
//                   statistics) of the best epoch, in memory, for early
//                   stopping to put back. Allocates on its first take only.
//   restore_best    puts the best epoch's parameters back, from the snapshot
//                   or from keep_best's file, or says why it cannot.
//   early_stop_line / early_stop_json  the progress line and the metrics
//                   log's line saying why and when fit stopped.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include <kiln/checkpoint.hpp>
#include <kiln/distributed.hpp>
#include <kiln/fit_options.hpp>

namespace kiln::detail {

/// The metric the options watch, or none. `classifier`, `regression`: what
/// the program's loss scores.
inline std::optional<monitor> watched_metric(const fit_options& o, bool classifier, bool regression) {
  std::optional<monitor> which;
  const auto watch = [&](monitor m, const char* who) {
    if (which && *which != m)
      throw std::invalid_argument(fmt::format(
          "kiln::trainer::fit: {} watches {}, but another option watches {}; reduce_on_plateau, early_stopping and "
          "keep_best share one record of the best value, so give them the same metric",
          who, monitor_name(m, o.metrics.top_k), monitor_name(*which, o.metrics.top_k)));
    which = m;
  };
  if (o.plateau) watch(o.plateau->metric, "reduce_on_plateau");
  if (o.early_stop) watch(o.early_stop->metric, "early_stopping");
  if (o.keep_best) watch(o.keep_best->metric, "keep_best");
  if (!which) return which;
  if (!o.validation)
    throw std::invalid_argument(
        "kiln::trainer::fit: reduce_on_plateau, early_stopping and keep_best watch the validation set; "
        "give fit_options::validation");
  const char* missing = nullptr;
  switch (*which) {
    case monitor::val_loss:
      break;
    case monitor::val_accuracy:
      if (!classifier) missing = "a loss that scores class labels (softmax_cross_entropy)";
      break;
    case monitor::val_top_k_accuracy:
      if (!classifier || o.metrics.top_k < 2) missing = "a classifier and fit_options::metrics.top_k >= 2";
      break;
    case monitor::val_macro_f1:
      if (!classifier || !o.metrics.per_class) missing = "a classifier and fit_options::metrics.per_class";
      break;
    case monitor::val_mse:
    case monitor::val_mae:
    case monitor::val_r2:
      if (!regression) missing = "a loss of real targets (mse)";
      break;
  }
  if (missing)
    throw std::invalid_argument(fmt::format("kiln::trainer::fit: the watched metric {} needs {}",
                                            monitor_name(*which, o.metrics.top_k), missing));
  if (o.keep_best && o.keep_best->file.empty())
    throw std::invalid_argument("kiln::trainer::fit: keep_best needs a file to save the best epoch to");
  return which;
}

/// The smallest change that counts as an improvement (plateau's, else early stop's; keep_best: any).
inline double watch_delta(const fit_options& o) {
  return o.plateau ? o.plateau->min_delta : o.early_stop ? o.early_stop->min_delta : 0.0;
}

template <class T>
class best_snapshot {
 public:
  void take(std::span<const T> parameters, std::span<const T> state, std::size_t epoch) {
    parameters_.assign(parameters.begin(), parameters.end());
    state_.assign(state.begin(), state.end());
    epoch_ = epoch;
  }
  /// Whether it holds epoch `epoch` (epochs count from 1).
  bool holds(std::size_t epoch) const noexcept { return epoch != 0 && epoch_ == epoch; }
  void put_back(std::span<T> parameters, std::span<T> state) const {
    std::copy(parameters_.begin(), parameters_.end(), parameters.begin());
    std::copy(state_.begin(), state_.end(), state.begin());
  }
  void forget() noexcept { epoch_ = 0; }

 private:
  std::vector<T> parameters_, state_;
  std::size_t epoch_ = 0;
};

/// Puts the parameters (and state values) of epoch `best` back into
/// `program`: from `snapshot`, or else from keep_best's file if it holds that
/// epoch (in one process only: another rank may not see the file). Else sets
/// `why_not` and changes nothing. `epoch`: the epoch done.
template <class Program, class T>
bool restore_best(Program& program, const best_snapshot<T>& snapshot, const fit_options& o, std::size_t best,
                  std::size_t epoch, std::string& why_not) {
  if (snapshot.holds(best)) {
    snapshot.put_back(program.parameters(), program.state());
    return true;
  }
  if (!o.keep_best || distributed::ranks() > 1) {
    why_not = fmt::format(
        "the parameters of epoch {} were not kept in memory (it came before trainer::load, or before this fit's "
        "early_stopping){}",
        best, o.keep_best ? ", and keep_best's file is not read across processes"
                          : "; give fit_options::keep_best to keep them on disk");
    return false;
  }
  best_snapshot<T> last;
  last.take(program.parameters(), program.state(), epoch);
  try {
    const training_position at = load_checkpoint(o.keep_best->file, program);
    if (at.epoch == best) return true;
    why_not = fmt::format("keep_best's file {} holds epoch {}, not {}", o.keep_best->file.string(), at.epoch, best);
  } catch (const checkpoint_error& e) {
    why_not = e.what();
  }
  last.put_back(program.parameters(), program.state());
  return false;
}

/// The record plateau, early stop and keep_best share (a checkpoint saves
/// best_metric, stale_epochs and has_best), the metric they watch in this
/// fit, and the best epoch's parameters in memory.
template <class T>
class best_watch {
 public:
  double best_metric = 0.0;  ///< the best value so far, as "lower is better" (an accuracy negated)
  std::size_t stale_epochs = 0;
  bool has_best = false;
  std::optional<monitor> watched;  ///< by this fit

  /// At the start of a fit: a record of another metric (an earlier fit's in
  /// this process) starts over. (A loaded record's metric is not known.)
  void start(std::optional<monitor> metric) {
    if (metric && recorded_ && *recorded_ != *metric) {
      has_best = false;
      stale_epochs = 0;
      snapshot_.forget();
    }
    watched = metric;
  }

  /// After trainer::load: the loaded parameters are the best epoch's when
  /// the record says it was the last one.
  template <class Program>
  void loaded(Program& program, std::size_t epoch) {
    recorded_.reset();
    snapshot_.forget();
    if (has_best && stale_epochs == 0) snapshot_.take(program.parameters(), program.state(), epoch);
  }

  /// After epoch `epoch`'s validation: records an improvement (taking the
  /// parameters when early stopping may want them, and calling `save_best`
  /// for keep_best on the primary rank), lowers the rate on a plateau, and
  /// on an early stop puts the best parameters back and says why.
  template <class Program, class SaveBest>
  void after_epoch(const fit_options& o, Program& program, std::size_t epoch, epoch_metrics& m, fit_history& history,
                   double& lr_scale, std::string& not_restored, SaveBest&& save_best) {
    if (!watched) return;
    recorded_ = watched;
    const double delta = watch_delta(o);
    const double v = monitored(*watched, *m.validation);
    const double value = lower_is_better(*watched) ? v : -v;
    if (!has_best || value < best_metric - delta) {
      best_metric = value;
      has_best = true;
      stale_epochs = 0;
      m.best = true;
      if (o.early_stop && o.early_stop->restore_best) snapshot_.take(program.parameters(), program.state(), epoch);
      if (o.keep_best && distributed::is_primary()) save_best();
    } else {
      ++stale_epochs;
    }
    history.best_epoch = epoch - stale_epochs;
    history.best_value = lower_is_better(*watched) ? best_metric : -best_metric;
    if (m.best) return;
    // Every `patience` epochs without improvement lower the rate once more.
    if (o.plateau && o.plateau->patience > 0 && stale_epochs % o.plateau->patience == 0) {
      lr_scale = std::max(lr_scale * o.plateau->factor, o.plateau->min_factor);
      m.lr_reduced = true;
    }
    if (o.early_stop && stale_epochs >= o.early_stop->patience) {
      history.stopped_early = true;
      history.stop_reason = fmt::format("{} has not improved by more than {} for {} epochs (best {:.6g} at epoch {})",
                                        monitor_name(*watched, o.metrics.top_k), delta, stale_epochs,
                                        history.best_value, history.best_epoch);
      if (o.early_stop->restore_best)
        history.restored_best = restore_best(program, snapshot_, o, history.best_epoch, epoch, not_restored);
    }
  }

 private:
  best_snapshot<T> snapshot_;
  std::optional<monitor> recorded_;  ///< the metric the record holds, when known
};

inline std::string early_stop_line(const fit_history& h, std::size_t epoch, const std::string& not_restored) {
  return fmt::format("early stop after epoch {}: {}; {}", epoch, h.stop_reason,
                     h.restored_best ? fmt::format("the parameters of epoch {} are back", h.best_epoch)
                                     : fmt::format("the parameters are the last epoch's: {}", not_restored));
}

/// `v` as a JSON string, quoted and escaped.
inline std::string json_string(std::string_view v) {
  std::string s = "\"";
  for (const char c : v) {
    if (c == '"' || c == '\\') s += '\\';
    if (static_cast<unsigned char>(c) < 0x20)
      s += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    else
      s += c;
  }
  return s + '"';
}

inline std::string early_stop_json(const fit_history& h, std::size_t epoch, const std::string& metric,
                                   const early_stopping& e, const std::string& not_restored) {
  std::string s = fmt::format(
      R"({{"event":"early_stop","epoch":{},"monitor":"{}","patience":{},"min_delta":{},"best_epoch":{},"best_value":{},)"
      R"("restored":{})",
      epoch, metric, e.patience, json_number(e.min_delta), h.best_epoch, json_number(h.best_value), h.restored_best);
  if (!not_restored.empty()) s += fmt::format(R"(,"why_not_restored":{})", json_string(not_restored));
  return s + "}";
}

}  // namespace kiln::detail
