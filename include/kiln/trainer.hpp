// kiln/trainer.hpp — the training loop.
//
// WHAT IT DOES
//   `trainer t{program, sgd{.lr = 0.05f, .momentum = 0.9f}};`
//   `t.fit(train, epochs{10}, {.validation = &test});`
//
//   fit       each epoch: a shuffled order from (seed, epoch); steps of exactly
//             B samples (the remainder dropped, or wrapped: `remainder::wrap`),
//             each a kiln::train_step; progress on a terminal or one line per
//             epoch; a JSON line per epoch to `metrics_log` when given.
//             `epochs{n}` is n more epochs (see kiln/fit_options.hpp).
//   evaluate  mean loss and accuracy over every sample (the last batch padded
//             and masked, so nothing is skipped and shapes stay static), and
//             the metrics asked for (kiln/metrics.hpp; a regression's always).
//   best      plateau, early stop and keep_best watch one validation metric;
//             early stopping puts the best epoch's parameters back (from
//             memory, or from keep_best's file after a load), and says why.
//   predict   the model's output for every sample (n × output size).
//   Also: what fit_options (kiln/fit_options.hpp) turns on; save / load.
//
// DETERMINISM
//   Same program seed and fit seed → the same bits; a resumed run continues bit for bit.
//
// ERRORS
//   A dataset that does not fit the model → std::invalid_argument before the
//   first step (detail/dataset_fit.hpp). A loss that is not finite →
//   kiln::training_error naming epoch and step; that step changed nothing.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <chrono>
#include <concepts>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/os.h>

#include <kiln/checkpoint.hpp>
#include <kiln/compile.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/detail/best_epoch.hpp>
#include <kiln/detail/dataset_fit.hpp>
#include <kiln/detail/validation_metrics.hpp>
#include <kiln/fit_options.hpp>
#include <kiln/detail/progress.hpp>
#include <kiln/distributed.hpp>
#include <kiln/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/optim/sgd.hpp>
#include <kiln/random.hpp>
#include <kiln/sampler.hpp>
#include <kiln/schedule.hpp>

namespace kiln {

namespace diagnostics {
template <class Count>
inline constexpr bool fit_takes_the_number_of_passes_as_kiln_epochs = false;
}  // namespace diagnostics

template <class Program, class Optimizer>
class trainer {
 public:
  using scalar = typename Program::scalar_type;
  using target_type = typename Program::target_type;
  /// Samples per step in this process (replicas × batch).
  static constexpr std::size_t B = Program::global_batch;
  static_assert(kiln::Optimizer<Optimizer, scalar>,
                "kiln::trainer<Program, Optimizer>: Optimizer must be an optimizer (sgd, adam, adamw; see "
                "kiln/optim/optimizer.hpp)");

  trainer(Program& p, Optimizer opt)
      : program_(p),
        optimizer_(opt),
        state_(p.parameters().size()),
        targets_(B * Program::targets_per_sample),
        base_lr_(opt.lr) {
    optimizer_.validate();
  }

  /// Ends fit() after the current step (from a callback, say).
  void stop() noexcept { stop_requested_ = true; }

  Program& program() noexcept { return program_; }
  /// The optimizer as the last step used it (its lr is the scheduled rate).
  const Optimizer& optimizer() const noexcept { return optimizer_; }
  /// The rate schedules and plateaus multiply (the optimizer's lr at construction).
  double base_lr() const noexcept { return base_lr_; }
  void set_base_lr(double lr) {
    if (!(lr > 0)) throw std::invalid_argument(fmt::format("kiln::trainer::set_base_lr: lr must be > 0, got {}", lr));
    base_lr_ = lr;
  }
  /// Epochs completed and steps applied (restored by load()); an epoch
  /// that stop() cut short is not counted, and the next fit finishes it.
  /// The steps are the program's store's one count (parameter_store::step).
  std::size_t epochs_done() const noexcept { return epoch_; }
  std::size_t steps_done() const noexcept { return static_cast<std::size_t>(program_.step()); }

  /// Writes parameters, optimizer state and the training position to `file`
  /// (atomically; see kiln/checkpoint.hpp).
  void save(const std::filesystem::path& file, std::uint64_t seed = 0) const {
    save_checkpoint(
        file, program_, std::span<const scalar>(state_.buffer()), Optimizer::name,
        training_position{epoch_, program_.step(), seed, {}, lr_scale_, best_.best_metric, best_.stale_epochs,
                          best_.has_best, partial_steps_});
  }
  /// Restores what save() wrote; the next fit() continues with the epoch
  /// after the saved one (fit's epochs{n}: n more), so with the same fit seed
  /// the run continues exactly as if it had not stopped. Throws
  /// kiln::checkpoint_error, changing nothing, if the file is not a
  /// checkpoint of this model and optimizer.
  training_position load(const std::filesystem::path& file) {
    const training_position at = load_checkpoint(file, program_, state_.buffer(), Optimizer::name);
    epoch_ = static_cast<std::size_t>(at.epoch);
    program_.set_step(at.step);
    lr_scale_ = at.lr_scale;
    best_.best_metric = at.best_metric;
    best_.stale_epochs = static_cast<std::size_t>(at.stale_epochs);
    best_.has_best = at.has_best != 0;
    partial_steps_ = static_cast<std::size_t>(at.step_in_epoch);
    best_.loaded(program_, epoch_);
    return at;
  }

  /// `train`: a dataset, or any kiln::sample_source (a dataset_view of your own memory, ...).
  template <detail::trainer_data Data>
  fit_history fit(const Data& data, epochs n, const fit_options& o = {}) {
    const auto& train = detail::as_source(data);
    if (distributed::ranks() == 1) return fit_here(train, n, o);
    // Across processes, an error on one rank would leave the others waiting
    // in the next allreduce: report it and end the whole job instead.
    try {
      return fit_here(train, n, o);
    } catch (const training_error&) {
      throw;  // every rank saw the same all-reduced loss: all of them stop here together
    } catch (const distributed::rank_failure&) {
      throw;  // a step's fault, agreed on by every rank (kiln/step.hpp): all of them stop here together
    } catch (const std::exception& e) {
      distributed::abort(fmt::format("kiln: rank {}: {}", distributed::rank(), e.what()));
    }
  }

  /// `fit(data, 10)`: the number of passes is written kiln::epochs{10}.
  template <detail::trainer_data Data, std::integral Count>
  fit_history fit(const Data&, Count, const fit_options& = {}) {
    static_assert(diagnostics::fit_takes_the_number_of_passes_as_kiln_epochs<Count>,
                  "kiln::trainer::fit(data, n): give the number of passes as kiln::epochs{n}, e.g. "
                  "fit(data, epochs{10})");
    return {};
  }

 private:
  template <sample_source Source>
  fit_history fit_here(const Source& train, epochs n, const fit_options& o) {
    detail::check_dataset<Program>(train, "training set");
    if (o.validation) detail::check_dataset<Program>(o.validation, "validation set");
    best_.start(detail::watched_metric(o, detail::is_classifier<Program>, detail::is_regression<Program>));
    std::optional<fmt::ostream> log;
    if (!o.metrics_log.empty() && distributed::is_primary()) {
      // A fresh run starts the log; a continued or resumed one appends to it.
      const int mode = fmt::file::WRONLY | fmt::file::CREATE |
                       (epoch_ == 0 && partial_steps_ == 0 ? fmt::file::TRUNC : fmt::file::APPEND);
      log.emplace(fmt::output_file(o.metrics_log.string(), mode));
    }
    // Under MPI only rank 0 prints and writes files.
    const bool primary = distributed::is_primary();
    const bool live = detail::draws_live(o.progress, o.output, primary);
    const bool lines = primary && o.progress != progress_mode::none && o.output;
    detail::progress_bar bar(o.output, live);

    fit_history history;
    // One order per epoch for every replica of every rank; this process's
    // replicas are workers rank·N … rank·N + N − 1 of the static sampler.
    const static_sampler sampler{.samples = train.info().samples,
                                 .batch = Program::batch_size,
                                 .workers = Program::replicas * static_cast<std::size_t>(distributed::ranks()),
                                 .seed = o.seed,
                                 .shuffle = o.shuffle,
                                 .remainder = o.remainder};
    const std::size_t first_worker = static_cast<std::size_t>(distributed::rank()) * Program::replicas;
    const std::size_t steps = sampler.steps();
    if (steps == 0) {
      throw std::invalid_argument(
          fmt::format("kiln::trainer::fit: the training set '{}' has {} samples, fewer than "
                      "one step of {} (use remainder::wrap to repeat samples)",
                      train.info().name, train.info().samples, sampler.step_size()));
    }

    stop_requested_ = false;
    detail::batch_reader<Program> reader;
    const std::size_t last_epoch = epoch_ + n.count;
    for (std::size_t e = epoch_ + 1; e <= last_epoch && !stop_requested_; ++e) {
      const std::vector<std::size_t> order = sampler.order(e);
      const auto start = std::chrono::steady_clock::now();
      double loss_sum = 0;
      std::size_t correct = 0, seen = 0, predictions = 0, done = 0;
      const std::size_t first_step = std::exchange(partial_steps_, 0);  // an epoch stopped part-way resumes there
      std::size_t s = first_step;
      for (; s < steps && !stop_requested_; ++s) {
        std::array<std::size_t, B> pick;
        for (std::size_t r = 0; r < Program::replicas; ++r)
          sampler.shard(order, s, first_worker + r,
                        std::span<std::size_t>(pick.data() + r * Program::batch_size, Program::batch_size));
        reader.gather(train, pick, B, {.seed = o.seed, .epoch = e, .training = true}, program_.input(),
                      std::span<target_type>(targets_));
        optimizer_.lr = static_cast<float>(base_lr_ * o.schedule(steps_done(), e) * lr_scale_);
        const loss_value r =
            kiln::train_step(program_, std::span<const target_type>(targets_), optimizer_, state_,
                             {.max_grad_norm = o.clip_grad_norm});
        if (!std::isfinite(r.loss)) {
          bar.clear();
          throw training_error(fmt::format(
              "kiln::trainer::fit: the loss is {} at epoch {}, step {} (of {}); training "
              "stopped before that step's update, so the parameters are those of the "
              "step before{}",
              r.loss, e, s + 1, steps, o.checkpoint_dir.empty() ? "" : ", and the last checkpoint is intact"));
        }
        ++done;
        loss_sum += r.loss;
        correct += r.correct;
        predictions += r.predictions;
        seen += B;
        const double elapsed = seconds_since(start);
        bar.update(e, last_epoch, s + 1, steps, loss_sum / static_cast<double>(done),
                   static_cast<double>(seen) / std::max(elapsed, 1e-9), elapsed);
        if (o.on_step_end) o.on_step_end(step_report{e, s + 1, steps_done(), r.loss, optimizer_.lr});
      }
      if (s < steps) {
        // stop() part-way: the epoch is not done; the next fit (or a
        // checkpoint saved now) continues it from step s.
        partial_steps_ = s;
        bar.clear();
        return history;
      }
      epoch_ = e;
      epoch_metrics m;
      m.epoch = e;
      m.steps = done;
      m.seconds = seconds_since(start);
      m.samples_per_second = static_cast<double>(seen) / std::max(m.seconds, 1e-9);
      m.train.loss = done ? loss_sum / static_cast<double>(done) : 0.0;
      m.train.samples = seen;
      if (Program::bound_loss::has_accuracy)
        m.train.accuracy = static_cast<double>(correct) / std::max<double>(static_cast<double>(predictions), 1);
      m.lr = optimizer_.lr;
      if (o.validation) m.validation = evaluate(o.validation, o.metrics);
      std::string not_restored;
      best_.after_epoch(o, program_, epoch_, m, history, lr_scale_, not_restored,
                        [&] { save(o.keep_best->file, o.seed); });
      stop_requested_ = stop_requested_ || history.stopped_early;
      if (!o.checkpoint_dir.empty() && primary) rotate_checkpoints(o);
      bar.clear();
      if (lines) fmt::print(o.output, "{}\n", detail::describe(m, last_epoch));
      if (log) log->print("{}\n", detail::to_json(m));
      if (history.stopped_early) {
        if (lines) fmt::print(o.output, "{}\n", detail::early_stop_line(history, e, not_restored));
        if (log)
          log->print("{}\n", detail::early_stop_json(history, e, detail::monitor_name(*best_.watched, o.metrics.top_k),
                                                     *o.early_stop, not_restored));
      }
      if (o.output) std::fflush(o.output);
      history.epochs.push_back(m);
      if (o.on_epoch_end) o.on_epoch_end(history.epochs.back());
    }
    return history;
  }

 public:
  /// Mean loss and accuracy over every sample of `data` (a dataset or any
  /// sample_source), and the metrics `asked` (a regression's MSE, MAE and R²
  /// always).
  template <detail::trainer_data Data>
  evaluation evaluate(const Data& data, const metric_options& asked = {}) {
    const auto& d = detail::as_source(data);
    detail::check_dataset<Program>(d, "evaluation set");
    double loss_sum = 0;
    std::size_t correct = 0, predictions = 0;
    evaluation ev;
    detail::start_metrics<Program>(ev, asked);
    for_each_batch(d, [&](std::size_t valid) {
      const loss_value r = program_.evaluate(std::span<const target_type>(targets_), valid);
      loss_sum += r.loss * static_cast<double>(valid);
      correct += r.correct;
      predictions += r.predictions;
      detail::add_metrics<Program>(ev, program_.output(), std::span<const target_type>(targets_), valid);
    });
    ev.samples = d.info().samples;
    ev.loss = ev.samples ? loss_sum / static_cast<double>(ev.samples) : 0.0;
    if (Program::bound_loss::has_accuracy)
      ev.accuracy = static_cast<double>(correct) / std::max<double>(static_cast<double>(predictions), 1);
    return ev;
  }

  /// The model's output for every sample of `d`: d.size() × output size.
  template <detail::trainer_data Data>
  std::vector<scalar> predict(const Data& data) {
    const auto& d = detail::as_source(data);
    detail::check_features<Program>(d, "prediction set");
    std::vector<scalar> out;
    out.reserve(d.info().samples * Program::output_size);
    for_each_batch(
        d,
        [&](std::size_t valid) {
          auto y = program_.output();
          out.insert(out.end(), y.begin(), y.begin() + static_cast<std::ptrdiff_t>(valid * Program::output_size));
        },
        /*with_targets=*/false);
    return out;
  }

 private:
  /// Saves this epoch's checkpoint, then keeps the newest keep_checkpoints
  /// epoch-NNNN.kiln files in the directory (by epoch number, whoever wrote
  /// them) and the one just written; other files are never touched.
  void rotate_checkpoints(const fit_options& o) {
    detail::create_checkpoint_directory(o.checkpoint_dir);
    const auto file = o.checkpoint_dir / checkpoint_file_name(epoch_);
    save(file, o.seed);
    remove_old_checkpoints(o.checkpoint_dir, o.keep_checkpoints, file);
  }

  static double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  }

  /// Runs forward over `d` in batches of B, padding the last with zeros, in
  /// eval mode (dropout off, batch_norm on its running statistics; under MPI,
  /// those of rank 0, so that every rank scores alike).
  template <sample_source Source, class F>
  void for_each_batch(const Source& d, F&& f, bool with_targets = true) {
    struct eval_mode {
      Program& p;
      bool was = p.training();
      explicit eval_mode(Program& q) : p(q) { p.set_training(false); }
      ~eval_mode() { p.set_training(was); }
    } mode{program_};
    if (!program_.state().empty() && distributed::ranks() > 1) distributed::broadcast_from_primary(program_.state());
    std::array<std::size_t, B> pick;
    detail::batch_reader<Program> reader;
    const std::size_t n = d.info().samples;
    for (std::size_t first = 0; first < n; first += B) {
      const std::size_t valid = std::min(B, n - first);
      for (std::size_t i = 0; i < valid; ++i) pick[i] = first + i;
      reader.gather(d, std::span<const std::size_t>(pick.data(), valid), valid, {}, program_.input(),
                    with_targets ? std::span<target_type>(targets_) : std::span<target_type>());
      program_.forward();
      f(valid);
    }
  }

  Program& program_;
  Optimizer optimizer_;
  typename Optimizer::template state<scalar> state_;
  std::vector<target_type> targets_;
  std::size_t epoch_ = 0;
  double base_lr_;
  double lr_scale_ = 1.0;
  bool stop_requested_ = false;
  std::size_t partial_steps_ = 0;  ///< steps done of an epoch stop() cut short
  detail::best_watch<scalar> best_;  ///< plateau, early stop, keep_best: the best value and epoch
};

}  // namespace kiln
