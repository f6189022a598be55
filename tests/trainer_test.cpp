// The trainer on small synthetic data: it learns, it is deterministic, it
// scores every sample, and it refuses data that does not fit.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include "support/blobs.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {
using namespace kiln;
using net = model<input<2, 2>, flatten, dense<16>, relu, dense<3>>;

/// Three Gaussian blobs in 4-d, `n` samples, labels 0..2.
using kiln::testing::blobs;

fit_options quiet(std::uint64_t seed = 1) { return {.seed = seed, .progress = progress_mode::none}; }

TEST(trainer, learns_separable_blobs) {
  const dataset train = blobs(600, 1), test = blobs(301, 2);
  auto p = compile<net, batch<16>>(1);
  trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f}};
  const auto before = t.evaluate(test);
  const auto history = t.fit(train, epochs{5}, quiet());
  const auto after = t.evaluate(test);
  ASSERT_EQ(history.epochs.size(), 5u);
  EXPECT_EQ(history.epochs[0].steps, 600u / 16);
  EXPECT_LT(after.loss, before.loss);
  EXPECT_GT(after.accuracy, 0.95);
  EXPECT_EQ(after.samples, 301u);
}

TEST(trainer, a_label_out_of_range_is_refused_before_the_first_step_naming_its_sample) {
  dataset train = blobs(600, 1);
  train.labels[537] = 3;  // the model scores classes 0, 1 and 2
  auto p = compile<net, batch<16>>(1);
  const std::vector<float> before(p.parameters().begin(), p.parameters().end());
  trainer t{p, sgd{.lr = 0.05f}};
  try {
    t.fit(train, epochs{1}, quiet());
    FAIL() << "a label of 3 for a model of 3 classes was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("sample 537 has label 3"), std::string::npos) << what;
    EXPECT_NE(what.find("3 classes (labels 0 to 2)"), std::string::npos) << what;
  }
  EXPECT_EQ(before, std::vector<float>(p.parameters().begin(), p.parameters().end()));  // no step was taken
  EXPECT_THROW(t.fit(train, epochs{1}, {.validation = &train, .progress = progress_mode::none}),
               std::invalid_argument);
}

TEST(trainer, same_seeds_give_bitwise_identical_parameters) {
  const dataset train = blobs(200, 3);
  auto run = [&](std::uint64_t fit_seed) {
    auto p = compile<net, batch<8>>(7);
    trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f, .nesterov = true}};
    t.fit(train, epochs{3}, quiet(fit_seed));
    return std::vector<float>(p.parameters().begin(), p.parameters().end());
  };
  const auto a = run(5), b = run(5), c = run(6);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_NE(a, c);  // another shuffle, another result
}

TEST(trainer, evaluate_scores_every_sample_despite_a_partial_batch) {
  const dataset d = blobs(53, 4);  // 53 = 6 × 8 + 5
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{}};
  const evaluation e = t.evaluate(d);
  // The same parameters, one sample at a time.
  auto one = compile<net, batch<1>>(0);
  std::copy(p.parameters().begin(), p.parameters().end(), one.parameters().begin());
  double loss = 0;
  std::size_t correct = 0;
  for (std::size_t i = 0; i < d.size(); ++i) {
    std::copy_n(d.sample(i).data(), 4, one.input().data());
    one.forward();
    const auto r = one.evaluate(std::span(&d.labels[i], 1));
    loss += r.loss;
    correct += r.correct;
  }
  EXPECT_EQ(e.samples, 53u);
  EXPECT_NEAR(e.loss, loss / 53, 1e-6);
  EXPECT_DOUBLE_EQ(e.accuracy, static_cast<double>(correct) / 53);
}

TEST(trainer, predict_returns_one_output_per_sample) {
  const dataset d = blobs(13, 5);
  auto p = compile<net, batch<4>>(2);
  trainer t{p, sgd{}};
  const auto y = t.predict(d);
  ASSERT_EQ(y.size(), 13u * 3);
  auto one = compile<net, batch<1>>(0);
  std::copy(p.parameters().begin(), p.parameters().end(), one.parameters().begin());
  std::copy_n(d.sample(12).data(), 4, one.input().data());
  one.forward();
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(y[12 * 3 + k], one.output()[k], 1e-6);
}

TEST(trainer, remainder_wrap_takes_one_more_step) {
  const dataset d = blobs(20, 6);
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{}};
  EXPECT_EQ(t.fit(d, epochs{1}, quiet()).epochs[0].steps, 2u);
  fit_options wrap = quiet();
  wrap.remainder = remainder::wrap;
  EXPECT_EQ(t.fit(d, epochs{1}, wrap).epochs[0].steps, 3u);
}

TEST(trainer, writes_json_lines_and_plain_progress_lines) {
  const dataset train = blobs(64, 7), val = blobs(30, 8);
  const auto log = std::filesystem::temp_directory_path() / "kiln_trainer_test.metrics.jsonl";
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{.lr = 0.01f}};
  t.fit(train, epochs{2}, {.validation = &val, .seed = 1, .metrics_log = log, .output = out});
  std::ifstream in(log);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_EQ(line.rfind("{\"epoch\":" + std::to_string(lines) + ",\"steps\":8,\"train_loss\":", 0), 0u) << line;
    EXPECT_NE(line.find("\"val_accuracy\":"), std::string::npos) << line;
    EXPECT_NE(line.find("\"samples_per_second\":"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 2);
  std::rewind(out);
  char buf[512] = {};
  ASSERT_NE(std::fgets(buf, sizeof buf, out), nullptr);
  EXPECT_EQ(std::string(buf).rfind("epoch 1/2: loss ", 0), 0u) << buf;  // not a terminal: plain lines
  std::fclose(out);
  std::filesystem::remove(log);
}

TEST(trainer, draws_a_live_progress_bar_when_asked) {
  std::FILE* out = std::tmpfile();
  ASSERT_NE(out, nullptr);
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{}};
  t.fit(blobs(64, 9), epochs{1}, {.progress = progress_mode::bar, .output = out});
  std::rewind(out);
  std::string all;
  for (int c; (c = std::fgetc(out)) != EOF;) all += static_cast<char>(c);
  std::fclose(out);
  EXPECT_NE(all.find("\r\033[Kepoch 1/1 ["), std::string::npos) << all;  // redrawn in place
  EXPECT_NE(all.find("8/8 loss "), std::string::npos) << all;            // the final step
  EXPECT_NE(all.find("samples/s ETA 0:00"), std::string::npos) << all;
  EXPECT_NE(all.find("epoch 1/1: loss "), std::string::npos) << all;  // then the epoch line
}

TEST(trainer, refuses_data_that_does_not_fit_the_model) {
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{}};
  dataset wrong = blobs(16, 1);
  wrong.sample_shape = {4, 1};  // the same size is not enough: the shape must be the model's
  try {
    t.evaluate(wrong);
    FAIL() << "samples of shape {4, 1} were taken by input<2, 2>";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::trainer: the evaluation set 'blobs' has samples of shape {4, 1}, but the model's input is "
                 "shape<2, 2>; if the same values in the same order are meant, say so with dataset::reshape({2, 2})");
  }
  wrong.reshape({2, 2});  // said explicitly: fine
  EXPECT_NO_THROW(t.evaluate(wrong));
  EXPECT_THROW(wrong.reshape({5}), std::invalid_argument);
  wrong.sample_shape = {5};
  wrong.features.resize(16 * 5);
  try {
    t.evaluate(wrong);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::trainer: the evaluation set 'blobs' has samples of 5 values, but the model's input "
                 "shape<2, 2> takes 4");
  }
  dataset unlabelled = blobs(16, 1);
  unlabelled.labels.clear();
  EXPECT_THROW(t.fit(unlabelled, epochs{1}, quiet()), std::invalid_argument);
  EXPECT_THROW(t.fit(blobs(5, 1), epochs{1}, quiet()), std::invalid_argument);  // fewer than one batch
}

TEST(trainer, refuses_labels_for_real_targets_and_targets_for_labels_saying_what_to_give) {
  dataset regression = blobs(16, 1);  // real targets, no labels
  regression.targets.assign(16 * 3, 0.5f);
  regression.target_size = 3;
  dataset classes = regression;  // class labels, no targets
  regression.labels.clear();
  classes.targets.clear();
  classes.target_size = 0;

  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{}};
  try {
    t.fit(regression, epochs{1}, quiet());
    FAIL() << "real targets were taken by softmax_cross_entropy";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::trainer: the training set 'blobs' has real targets (dataset::targets), but "
                 "softmax_cross_entropy<> scores class labels: give dataset::labels, 1 per sample, or use a loss "
                 "for real targets (kiln::mse)");
  }
  EXPECT_NO_THROW(t.fit(classes, epochs{1}, quiet()));

  auto q = compile<net, batch<8>, mse>(2);
  trainer u{q, sgd{}};
  try {
    u.evaluate(classes);
    FAIL() << "class labels were taken by mse";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::trainer: the evaluation set 'blobs' has class labels (dataset::labels), but mse compares "
                 "real targets: give dataset::targets with target_size = 3, or use a loss for class labels "
                 "(kiln::softmax_cross_entropy<>)");
  }
  EXPECT_NO_THROW(u.fit(regression, epochs{1}, quiet()));
  regression.target_size = 1;  // a count per sample that is not the loss's
  regression.targets.resize(16);
  try {
    u.fit(regression, epochs{1}, quiet());
    FAIL() << "1 target per sample was taken for 3";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kiln::trainer: the training set 'blobs' has 1 targets per sample; mse needs 3");
  }
}

TEST(trainer, a_nan_loss_stops_training_before_the_update) {
  dataset bad = blobs(16, 1);
  for (std::size_t i = 8; i < 16; ++i) bad.features[i * 4] = std::nanf("");
  auto p = compile<net, batch<8>>(2);
  trainer t{p, sgd{.lr = 0.1f}};
  fit_options o = quiet();
  o.shuffle = false;  // batch 1 is clean, batch 2 holds the NaNs
  try {
    t.fit(bad, epochs{1}, o);
    FAIL() << "no exception";
  } catch (const training_error& e) {
    EXPECT_NE(std::string(e.what()).find("the loss is nan at epoch 1, step 2 (of 2)"), std::string::npos) << e.what();
  }
  // The parameters are exactly those after the one good step.
  dataset clean = bad;
  clean.features.resize(8 * 4);
  clean.labels.resize(8);
  auto q = compile<net, batch<8>>(2);
  trainer u{q, sgd{.lr = 0.1f}};
  u.fit(clean, epochs{1}, o);
  EXPECT_EQ(0, std::memcmp(p.parameters().data(), q.parameters().data(), p.parameters().size_bytes()));
}

TEST(trainer, regression_with_mse) {
  dataset d;
  d.name = "line";
  d.sample_shape = {1};
  d.target_size = 1;
  for (int i = 0; i < 64; ++i) {
    const float x = static_cast<float>(i) / 32 - 1;
    d.features.push_back(x);
    d.targets.push_back(3 * x - 0.5f);
  }
  auto p = compile<model<input<1>, dense<1>>, batch<8>, mse>(1);
  trainer t{p, sgd{.lr = 0.1f, .momentum = 0.5f}};
  t.fit(d, epochs{40}, quiet());
  const auto e = t.evaluate(d);
  EXPECT_LT(e.loss, 1e-4);
  EXPECT_TRUE(std::isnan(e.accuracy));
  const float w = p.layer_parameter<1, 0>()[0], b = p.layer_parameter<1, 1>()[0];
  EXPECT_NEAR(w, 3.0f, 1e-2);
  EXPECT_NEAR(b, -0.5f, 1e-2);
}
}  // namespace
