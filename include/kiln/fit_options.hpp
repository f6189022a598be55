// kiln/fit_options.hpp — what trainer::fit takes and what it reports: the
// number of epochs, fit_options (validation, seed, schedule, plateau, early
// stopping, clipping, checkpoints, progress, callbacks), the metrics of each
// epoch and their text and JSON-lines forms, and training_error.
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
#include <kiln/sampler.hpp>
#include <kiln/schedule.hpp>

namespace kiln {

/// How many passes over the training set: `epochs{10}`.
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

struct fit_options {
  const dataset* validation = nullptr;
  std::uint64_t seed = 0;
  bool shuffle = true;
  kiln::remainder remainder = remainder::drop;
  progress_mode progress = progress_mode::automatic;
  std::filesystem::path metrics_log{};  ///< JSON lines, one per epoch (empty: none)
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
};

struct fit_history {
  std::vector<epoch_metrics> epochs;
  bool stopped_early = false;  ///< early_stopping ended the run
};

/// Training stopped because something went wrong in the numbers.
class training_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {

inline std::string json_number(double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : "null"; }
inline std::string to_json(const epoch_metrics& m) {
  std::string s = fmt::format(R"({{"epoch":{},"steps":{},"train_loss":{},"train_accuracy":{})", m.epoch, m.steps,
                              json_number(m.train.loss), json_number(m.train.accuracy));
  if (m.validation) {
    s += fmt::format(R"(,"val_loss":{},"val_accuracy":{})", json_number(m.validation->loss),
                     json_number(m.validation->accuracy));
  }
  s += fmt::format(R"(,"lr":{},"seconds":{},"samples_per_second":{}}})", json_number(m.lr), json_number(m.seconds),
                   json_number(m.samples_per_second));
  return s;
}
inline std::string describe(const epoch_metrics& m, std::size_t of) {
  std::string s = fmt::format("epoch {}/{}: loss {:.4f}", m.epoch, of, m.train.loss);
  if (std::isfinite(m.train.accuracy)) s += fmt::format(", accuracy {:.4f}", m.train.accuracy);
  if (m.validation) {
    s += fmt::format(", val_loss {:.4f}", m.validation->loss);
    if (std::isfinite(m.validation->accuracy)) s += fmt::format(", val_accuracy {:.4f}", m.validation->accuracy);
  }
  return s + fmt::format(", {:.1f} s, {:.0f} samples/s", m.seconds, m.samples_per_second);
}

}  // namespace detail

}  // namespace kiln
