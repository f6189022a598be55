// The trainer's metrics, best epoch, early stop, resume and progress, on
// tiny models: metrics equal those of the predictions, the log parses as
// JSON, early stopping puts the best epoch's parameters back bit for bit
// (also across a load), and the bar fits its width and stays off pipes.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/blobs.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {
using namespace kiln;
using kiln::testing::blobs;
using net = model<input<2, 2>, flatten, dense<16>, relu, dense<3>>;
namespace fs = std::filesystem;

std::vector<float> params_of(const auto& p) { return {p.parameters().begin(), p.parameters().end()}; }

std::vector<nlohmann::json> read_log(const fs::path& file) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));  // throws if not JSON
  return lines;
}

std::string read_all(std::FILE* f) {
  std::rewind(f);
  std::string all;
  for (int c; (c = std::fgetc(f)) != EOF;) all += static_cast<char>(c);
  return all;
}

fs::path temp(const std::string& name) { return fs::temp_directory_path() / ("kiln_trainer_metrics_" + name); }

/// Labels without signal and a high rate: the validation loss soon stops improving.
struct noisy {
  dataset train = blobs(96, 2, {2, 2}, 3.0), val = blobs(48, 3, {2, 2}, 3.0);
  noisy() {
    rng g(4);
    for (auto& l : train.labels) l = static_cast<std::uint32_t>(g.below(3));
    for (auto& l : val.labels) l = static_cast<std::uint32_t>(g.below(3));
  }
};

TEST(trainer_metrics, evaluate_gives_the_metrics_of_the_predictions) {
  const dataset d = blobs(53, 4, {2, 2}, 1.5);  // a partial last batch
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{.lr = 0.05f}};
  t.fit(blobs(64, 1), epochs{1}, {.progress = progress_mode::none});
  const evaluation e = t.evaluate(d, {.top_k = 2, .per_class = true, .confusion = true});
  classification_metrics expected(3);
  const std::vector<float> y = t.predict(d);
  expected.add(std::span<const float>(y), std::span<const std::uint32_t>(d.labels));
  ASSERT_TRUE(e.classification);
  EXPECT_EQ(e.classification->count(), 53u);
  EXPECT_TRUE(std::equal(expected.confusion_matrix().begin(), expected.confusion_matrix().end(),
                         e.classification->confusion_matrix().begin()));
  EXPECT_EQ(e.classification->accuracy(), e.accuracy);  // the loss's accuracy, counted the same way
  EXPECT_EQ(e.top_k_accuracy(), expected.top_k_accuracy(2));
  EXPECT_EQ(e.classification->macro_f1(), expected.macro_f1());
  EXPECT_FALSE(t.evaluate(d).classification);  // not asked: not computed
}

TEST(trainer_metrics, a_regression_reports_mse_mae_and_r2) {
  dataset d;
  d.name = "plane";
  d.sample_shape = {2};
  d.target_size = 2;
  rng g(3);
  for (int i = 0; i < 45; ++i) {
    const float a = static_cast<float>(g.normal()), b = static_cast<float>(g.normal());
    d.features.insert(d.features.end(), {a, b});
    d.targets.insert(d.targets.end(), {a + 2 * b, a - b + 1});
  }
  auto p = compile<model<input<2>, dense<2>>, batch<8>, mse>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  const auto h = t.fit(d, epochs{3}, {.validation = &d, .progress = progress_mode::none});
  const evaluation e = t.evaluate(d);
  ASSERT_TRUE(e.regression);
  const std::vector<float> y = t.predict(d);
  double se = 0, ae = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    se += (double(y[i]) - d.targets[i]) * (double(y[i]) - d.targets[i]);
    ae += std::abs(double(y[i]) - d.targets[i]);
  }
  EXPECT_NEAR(e.regression->mse(), se / 90, 1e-12);
  EXPECT_NEAR(e.regression->mae(), ae / 90, 1e-12);
  EXPECT_NEAR(e.regression->mse(), e.loss, 1e-6);  // mse's loss is the MSE
  EXPECT_GT(e.regression->r2(), 0.5);
  ASSERT_TRUE(h.epochs.back().validation->regression);
}

TEST(trainer_metrics, the_log_lines_are_json_with_every_asked_metric) {
  const dataset train = blobs(64, 7), val = blobs(30, 8);
  const fs::path log = temp("log.jsonl");
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{.lr = 0.05f}};
  t.fit(train, epochs{2},
        {.validation = &val,
         .progress = progress_mode::none,
         .metrics_log = log,
         .metrics = {.top_k = 2, .per_class = true, .confusion = true},
         .keep_best = best_checkpoint{.file = temp("log_best.kiln"), .metric = monitor::val_macro_f1}});
  const auto lines = read_log(log);
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& j : lines) {
    for (const char* key :
         {"epoch", "steps", "train_loss", "train_accuracy", "val_loss", "val_accuracy", "val_top2_accuracy",
          "val_macro_precision", "val_macro_recall", "val_macro_f1", "lr", "seconds", "samples_per_second"})
      EXPECT_TRUE(j.contains(key)) << key << " missing from " << j.dump();
    ASSERT_EQ(j["val_confusion"].size(), 3u);
    std::uint64_t total = 0;
    for (const auto& row : j["val_confusion"]) {
      ASSERT_EQ(row.size(), 3u);
      for (const auto& v : row) total += v.get<std::uint64_t>();
    }
    EXPECT_EQ(total, 30u);
    EXPECT_EQ(j["val_f1"].size(), 3u);
    EXPECT_EQ(j["val_support"], nlohmann::json::array({10, 10, 10}));
    EXPECT_GE(j["val_top2_accuracy"].get<double>(), j["val_accuracy"].get<double>());
  }
  EXPECT_EQ(lines[0]["best"], true);  // the first epoch is the best so far
  fs::remove(log);
  fs::remove(temp("log_best.kiln"));
}

TEST(trainer_metrics, early_stopping_restores_the_best_epoch_bit_for_bit_and_says_why) {
  noisy d;
  const fs::path log = temp("stop.jsonl"), best = temp("stop_best.kiln");
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.2f, .momentum = 0.9f}};
  std::vector<std::vector<float>> after_epoch;  // the parameters each epoch ended with
  const auto h = t.fit(d.train, epochs{40},
                       {.validation = &d.val,
                        .progress = progress_mode::lines,
                        .metrics_log = log,
                        .output = out,
                        .early_stop = early_stopping{.patience = 3},
                        .keep_best = best_checkpoint{.file = best},
                        .on_epoch_end = [&](const epoch_metrics&) { after_epoch.push_back(params_of(p)); }});
  ASSERT_TRUE(h.stopped_early);
  const std::size_t stop = h.epochs.size();
  ASSERT_LT(stop, 40u);
  EXPECT_EQ(t.epochs_done(), stop);
  EXPECT_EQ(h.best_epoch, stop - 3);
  EXPECT_TRUE(h.restored_best);
  EXPECT_EQ(h.best_value, h.epochs[h.best_epoch - 1].validation->loss);
  for (std::size_t e = h.best_epoch; e < stop - 1; ++e) EXPECT_NE(after_epoch[e], after_epoch[h.best_epoch - 1]);
  EXPECT_EQ(params_of(p), after_epoch[h.best_epoch - 1]);  // bit for bit
  auto q = compile<net, batch<8>>(99);
  EXPECT_EQ(load_checkpoint(best, q).epoch, h.best_epoch);  // keep_best's file: the same epoch, the same bits
  EXPECT_EQ(params_of(q), after_epoch[h.best_epoch - 1]);

  const auto lines = read_log(log);
  ASSERT_EQ(lines.size(), stop + 1);
  const auto& why = lines.back();
  EXPECT_EQ(why["event"], "early_stop");
  EXPECT_EQ(why["epoch"], stop);
  EXPECT_EQ(why["monitor"], "val_loss");
  EXPECT_EQ(why["patience"], 3);
  EXPECT_EQ(why["best_epoch"], h.best_epoch);
  EXPECT_EQ(why["restored"], true);
  const std::string printed = read_all(out);
  const std::string expected_line = fmt::format(
      "early stop after epoch {}: val_loss has not improved by more than "
      "0.0001 for 3 epochs (best {:.6g} at epoch {}); the parameters of "
      "epoch {} are back\n",
      stop, h.best_value, h.best_epoch, h.best_epoch);
  EXPECT_NE(printed.find(expected_line), std::string::npos) << printed;
  std::fclose(out);

  // A later fit continues: epochs{n} is n more, from the best parameters, and the log grows.
  const auto more = t.fit(d.train, epochs{2},
                          {.validation = &d.val,
                           .progress = progress_mode::none,
                           .metrics_log = log,
                           .early_stop = early_stopping{.patience = 3}});
  ASSERT_FALSE(more.epochs.empty());
  EXPECT_EQ(more.epochs.front().epoch, stop + 1);
  EXPECT_EQ(read_log(log).front()["epoch"], 1);
  fs::remove(log);
  fs::remove(best);
}

TEST(trainer_metrics, a_run_resumed_from_a_checkpoint_stops_and_restores_as_the_straight_run) {
  noisy d;
  const fs::path best = temp("resume_best.kiln"), ckpt = temp("resume.kiln"), log = temp("resume.jsonl");
  auto options = [&](bool keep) {
    fit_options o{
        .validation = &d.val, .seed = 3, .progress = progress_mode::none, .early_stop = early_stopping{.patience = 3}};
    if (keep) o.keep_best = best_checkpoint{.file = best};
    o.metrics_log = log;
    return o;
  };
  auto a = compile<net, batch<8>>(1);
  trainer ta{a, sgd{.lr = 0.2f, .momentum = 0.9f}};
  const auto straight = ta.fit(d.train, epochs{40}, options(true));
  ASSERT_TRUE(straight.stopped_early);
  const std::size_t stop = straight.epochs.size(),
                    cut = stop - 1;  // 2 epochs past the best: not in memory after a load
  ASSERT_GT(cut, straight.best_epoch);

  for (const bool keep : {true, false}) {
    auto b = compile<net, batch<8>>(1);
    {
      trainer tb{b, sgd{.lr = 0.2f, .momentum = 0.9f}};
      tb.fit(d.train, epochs{cut}, options(keep));
      tb.save(ckpt, 3);
    }
    auto c = compile<net, batch<8>>(5);
    trainer tc{c, sgd{.lr = 0.2f, .momentum = 0.9f}};
    tc.load(ckpt);
    const auto resumed = tc.fit(d.train, epochs{40 - cut}, options(keep));
    ASSERT_TRUE(resumed.stopped_early) << keep;
    EXPECT_EQ(tc.epochs_done(), stop);
    EXPECT_EQ(resumed.best_epoch, straight.best_epoch);
    if (keep) {
      EXPECT_TRUE(resumed.restored_best);  // from keep_best's file
      EXPECT_EQ(params_of(c), params_of(a));
    } else {
      EXPECT_FALSE(resumed.restored_best);  // nothing kept it: said so, and the last parameters stay
      EXPECT_NE(resumed.stop_reason.find("val_loss has not improved"), std::string::npos);
      const auto why = read_log(log).back();
      EXPECT_EQ(why["restored"], false);
      EXPECT_EQ(why["why_not_restored"],
                fmt::format("the parameters of epoch {} were not kept in memory (it came before trainer::load, or "
                            "before this fit's early_stopping); give fit_options::keep_best to keep them on disk",
                            straight.best_epoch));
      EXPECT_NE(params_of(c), params_of(a));
    }
  }
  fs::remove(best);
  fs::remove(ckpt);
  fs::remove(log);
}

TEST(trainer_metrics, resuming_from_the_stopping_epochs_checkpoint_continues_as_the_stopped_trainer) {
  noisy d;
  const fs::path dir = temp("stop_dir"), best = temp("stop_dir_best.kiln");
  fs::remove_all(dir);
  const fit_options o{.validation = &d.val,
                      .seed = 2,
                      .progress = progress_mode::none,
                      .checkpoint_dir = dir,
                      .early_stop = early_stopping{.patience = 2},
                      .keep_best = best_checkpoint{.file = best}};
  auto a = compile<net, batch<8>>(1);
  trainer ta{a, sgd{.lr = 0.2f, .momentum = 0.9f}};
  const auto h = ta.fit(d.train, epochs{40}, o);
  ASSERT_TRUE(h.stopped_early);
  const std::size_t stop = h.epochs.size();
  auto b = compile<net, batch<8>>(3);
  trainer tb{b, sgd{.lr = 0.2f, .momentum = 0.9f}};
  tb.load(dir / checkpoint_file_name(stop));
  EXPECT_EQ(params_of(b), params_of(a));  // the stopping epoch's checkpoint holds the best parameters
  const auto more_a = ta.fit(d.train, epochs{3}, o), more_b = tb.fit(d.train, epochs{3}, o);
  EXPECT_EQ(more_a.epochs.size(), more_b.epochs.size());
  EXPECT_EQ(more_a.stopped_early, more_b.stopped_early);
  EXPECT_EQ(tb.epochs_done(), ta.epochs_done());
  EXPECT_EQ(params_of(b), params_of(a));  // bit for bit, stopped again or not
  fs::remove_all(dir);
  fs::remove(best);
}

TEST(trainer_metrics, a_fit_that_watches_another_metric_starts_a_new_record) {
  noisy d;
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.2f, .momentum = 0.9f}};
  const auto first =
      t.fit(d.train, epochs{8},
            {.validation = &d.val, .progress = progress_mode::none, .early_stop = early_stopping{.patience = 50}});
  EXPECT_TRUE(first.epochs.front().best);
  // The same metric: the record goes on (epoch 9 is the best only if it beats the first eight).
  const auto same =
      t.fit(d.train, epochs{1},
            {.validation = &d.val, .progress = progress_mode::none, .early_stop = early_stopping{.patience = 50}});
  double lowest = first.epochs.front().validation->loss;
  for (const auto& e : first.epochs) lowest = std::min(lowest, e.validation->loss);
  EXPECT_EQ(same.epochs.front().best, same.epochs.front().validation->loss < lowest - 1e-4);
  // Another metric: a loss is no accuracy, so the record starts over.
  const auto other = t.fit(d.train, epochs{1},
                           {.validation = &d.val,
                            .progress = progress_mode::none,
                            .early_stop = early_stopping{.metric = monitor::val_accuracy, .patience = 50}});
  EXPECT_TRUE(other.epochs.front().best);
  EXPECT_EQ(other.best_epoch, 10u);
}

TEST(trainer_metrics, epochs_n_means_n_more) {
  const dataset d = blobs(32, 1);
  std::FILE* out = std::tmpfile();
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{}};
  t.fit(d, epochs{2}, {.progress = progress_mode::none});
  const auto h = t.fit(d, epochs{3}, {.progress = progress_mode::lines, .output = out});
  ASSERT_EQ(h.epochs.size(), 3u);
  EXPECT_EQ(h.epochs.front().epoch, 3u);
  EXPECT_EQ(t.epochs_done(), 5u);
  EXPECT_EQ(read_all(out).rfind("epoch 3/5: loss ", 0), 0u);
  std::fclose(out);
}

TEST(trainer_metrics, watched_metrics_must_agree_and_exist) {
  const dataset d = blobs(32, 1);
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{}};
  try {
    t.fit(d, epochs{1},
          {.validation = &d,
           .progress = progress_mode::none,
           .plateau = reduce_on_plateau{},
           .early_stop = early_stopping{.metric = monitor::val_accuracy}});
    FAIL() << "two metrics were watched";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::trainer::fit: early_stopping watches val_accuracy, but another option watches val_loss; "
                 "reduce_on_plateau, early_stopping and keep_best share one record of the best value, so give them "
                 "the same metric");
  }
  try {
    t.fit(d, epochs{1},
          {.validation = &d, .progress = progress_mode::none, .early_stop = early_stopping{.metric = monitor::val_r2}});
    FAIL() << "R² of a classifier";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kiln::trainer::fit: the watched metric val_r2 needs a loss of real targets (mse)");
  }
  EXPECT_THROW(t.fit(d, epochs{1},
                     {.validation = &d,
                      .progress = progress_mode::none,
                      .early_stop = early_stopping{.metric = monitor::val_top_k_accuracy}}),
               std::invalid_argument);  // metrics.top_k not asked
  EXPECT_THROW(t.fit(d, epochs{1}, {.progress = progress_mode::none, .keep_best = best_checkpoint{.file = "x"}}),
               std::invalid_argument);  // no validation set
  EXPECT_EQ(t.epochs_done(), 0u);
}

TEST(progress, the_line_fits_the_width) {
  for (std::size_t width = 1; width <= 200; ++width) {
    const std::string line = detail::progress_line(width, 12, 100, 4321, 9375, 0.123456, 73456.7, 12.5);
    EXPECT_LE(line.size(), width > 0 ? width - 1 : 0) << width;
    if (width >= 40) {
      EXPECT_NE(line.find("4321/9375 loss 0.1235"), std::string::npos) << line;
    }
    if (width >= 100) {
      EXPECT_NE(line.find("samples/s ETA "), std::string::npos) << line;
    }
  }
  // 80 columns: the bar takes the room left, up to the last column but one.
  const std::string eighty = detail::progress_line(80, 1, 2, 5, 10, 0.5, 100, 1);
  EXPECT_EQ(eighty, "epoch 1/2 [=============              ] 5/10 loss 0.5000 100 samples/s ETA 0:01");
  EXPECT_EQ(eighty.size(), 79u);
  EXPECT_EQ(detail::progress_line(40, 1, 2, 5, 10, 0.5, 100, 1), "epoch 1/2 5/10 loss 0.5000 ETA 0:01");  // no bar
  EXPECT_EQ(detail::progress_line(30, 1, 2, 5, 10, 0.5, 100, 1), "epoch 1/2 5/10 loss 0.5000");
  EXPECT_EQ(detail::progress_line(12, 1, 2, 5, 10, 0.5, 100, 1), "epoch 1/2 5");
}

TEST(progress, the_bar_follows_columns_when_it_cannot_ask_the_terminal) {
  ::setenv("COLUMNS", "50", 1);
  EXPECT_EQ(detail::terminal_width(nullptr), 50u);
  std::FILE* out = std::tmpfile();
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{}};
  t.fit(blobs(64, 9), epochs{1}, {.progress = progress_mode::bar, .output = out});
  ::unsetenv("COLUMNS");
  const std::string all = read_all(out);
  std::fclose(out);
  std::size_t redraws = 0;
  for (std::size_t at = all.find("\r\033[K"); at != std::string::npos; at = all.find("\r\033[K", at + 1)) {
    const std::size_t end = std::min(all.find('\r', at + 1), all.find('\n', at + 1));
    const std::string drawn = all.substr(at + 4, end - at - 4);
    if (drawn.find(": loss ") != std::string::npos) continue;  // the epoch's line, printed after the bar is cleared
    EXPECT_LE(drawn.size(), 49u) << drawn;
    redraws += !drawn.empty();
  }
  EXPECT_GE(redraws, 1u);
  EXPECT_NE(all.find("8/8 loss "), std::string::npos) << all;
}

TEST(progress, never_a_bar_into_a_pipe_nor_from_another_rank) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::FILE* w = ::fdopen(fds[1], "w");
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{}};
  t.fit(blobs(64, 9), epochs{2}, {.output = w});  // progress_mode::automatic
  std::fclose(w);
  std::string got;
  char buf[256];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  EXPECT_EQ(got.find('\r'), std::string::npos) << got;
  EXPECT_EQ(got.find('\033'), std::string::npos) << got;
  EXPECT_EQ(got.rfind("epoch 1/2: loss ", 0), 0u) << got;
  EXPECT_NE(got.find("\nepoch 2/2: loss "), std::string::npos) << got;
  EXPECT_FALSE(detail::draws_live(progress_mode::automatic, stdout, /*primary=*/false));
  EXPECT_FALSE(detail::draws_live(progress_mode::bar, stdout, /*primary=*/false));
  EXPECT_TRUE(detail::draws_live(progress_mode::bar, stdout, /*primary=*/true));
}
}  // namespace
