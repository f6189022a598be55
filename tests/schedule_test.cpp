// Learning-rate schedules, plateau, early stopping, clipping and callbacks.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include "support/blobs.hpp"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>
#include <vector>

namespace {
using namespace kiln;

TEST(schedule, step_decay_cosine_and_warmup) {
  const schedule s = step_decay{.every_epochs = 2, .gamma = 0.5};
  EXPECT_DOUBLE_EQ(s(0, 1), 1.0);
  EXPECT_DOUBLE_EQ(s(0, 2), 1.0);
  EXPECT_DOUBLE_EQ(s(0, 3), 0.5);
  EXPECT_DOUBLE_EQ(s(0, 5), 0.25);
  const schedule c = cosine{.steps = 100, .floor = 0.1};
  EXPECT_DOUBLE_EQ(c(0, 1), 1.0);
  EXPECT_NEAR(c(50, 1), 0.1 + 0.9 * 0.5, 1e-12);
  EXPECT_DOUBLE_EQ(c(100, 1), 0.1);
  EXPECT_DOUBLE_EQ(c(1000, 1), 0.1);
  const schedule w = linear_warmup{.steps = 4};
  EXPECT_DOUBLE_EQ(w(0, 1), 0.25);
  EXPECT_DOUBLE_EQ(w(3, 1), 1.0);
  EXPECT_DOUBLE_EQ(w(9, 1), 1.0);
}

TEST(schedule, warmup_then_cosine) {
  const schedule s = linear_warmup{.steps = 10} >> cosine{.steps = 20};
  EXPECT_DOUBLE_EQ(s(0, 1), 0.1);
  EXPECT_DOUBLE_EQ(s(9, 1), 1.0);
  EXPECT_DOUBLE_EQ(s(10, 1), 1.0);  // cosine's step 0
  EXPECT_NEAR(s(20, 1), 0.5, 1e-12);
  EXPECT_NEAR(s(30, 1), 0.0, 1e-12);
  EXPECT_EQ(s.length(), 30u);
}

using net = model<input<4>, dense<16>, relu, dense<3>>;
dataset blobs(std::size_t n, std::uint64_t seed, double spread = 0.5) {
  return kiln::testing::blobs(n, seed, {4}, spread);
}

TEST(trainer_schedule, the_optimizer_sees_the_scheduled_rate) {
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.1f}};
  std::vector<double> rates;
  t.fit(blobs(64, 1), epochs{2},
        {.progress = progress_mode::none,
         .schedule = linear_warmup{.steps = 4} >> cosine{.steps = 12},
         .on_step_end = [&](const step_report& r) { rates.push_back(r.lr); }});
  ASSERT_EQ(rates.size(), 16u);
  EXPECT_FLOAT_EQ(static_cast<float>(rates[0]), 0.025f);
  EXPECT_FLOAT_EQ(static_cast<float>(rates[3]), 0.1f);
  EXPECT_FLOAT_EQ(static_cast<float>(rates[4]), 0.1f);
  EXPECT_NEAR(rates[10], 0.1 * 0.5, 1e-7);
  EXPECT_NEAR(rates[15], 0.1 * (1 + std::cos(std::numbers::pi * 11 / 12)) / 2, 1e-7);
}

TEST(trainer_schedule, plateau_lowers_the_rate_and_early_stopping_ends_the_run) {
  // Labels that carry no signal: validation loss stops improving quickly.
  dataset noise = blobs(96, 2, 3.0), val = blobs(48, 3, 3.0);
  rng g(4);
  for (auto& l : noise.labels) l = static_cast<std::uint32_t>(g.below(3));
  for (auto& l : val.labels) l = static_cast<std::uint32_t>(g.below(3));
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.2f, .momentum = 0.9f}};
  const auto h = t.fit(noise, epochs{40},
                       {.validation = &val,
                        .progress = progress_mode::none,
                        .plateau = reduce_on_plateau{.factor = 0.5, .patience = 2},
                        .early_stop = early_stopping{.patience = 6}});
  EXPECT_TRUE(h.stopped_early);
  EXPECT_LT(h.epochs.size(), 40u);
  bool reduced = false;
  for (const auto& e : h.epochs) reduced = reduced || e.lr_reduced;
  EXPECT_TRUE(reduced);
  EXPECT_LT(h.epochs.back().lr, 0.2 * 0.5 + 1e-6);
  EXPECT_THROW(t.fit(noise, epochs{1}, {.progress = progress_mode::none, .early_stop = early_stopping{}}),
               std::invalid_argument);  // nothing to watch
}

TEST(trainer_schedule, clipping_bounds_the_update) {
  // One SGD step without momentum moves the parameters by lr × gradient, so
  // the distance travelled is lr × the clipped norm.
  auto p = compile<net, batch<8>>(1);
  auto q = p;
  const dataset d = blobs(8, 5);
  trainer t{p, sgd{.lr = 1.0f}};
  t.fit(d, epochs{1}, {.shuffle = false, .progress = progress_mode::none, .clip_grad_norm = 0.01});
  double moved = 0;
  for (std::size_t i = 0; i < p.parameters().size(); ++i)
    moved += std::pow(double(p.parameters()[i]) - q.parameters()[i], 2);
  EXPECT_NEAR(std::sqrt(moved), 0.01, 1e-5);
}

TEST(trainer_schedule, callbacks_run_and_stop_ends_fit_part_way_through_an_epoch) {
  const dataset d = blobs(64, 6);  // 8 steps an epoch
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f}};
  std::size_t steps = 0, epochs_seen = 0;
  fit_options o{.progress = progress_mode::none,
                .on_step_end =
                    [&](const step_report& r) {
                      ++steps;
                      if (r.step == 11) t.stop();
                    },
                .on_epoch_end = [&](const epoch_metrics&) { ++epochs_seen; }};
  const auto h = t.fit(d, epochs{3}, o);
  EXPECT_EQ(steps, 11u);
  EXPECT_EQ(epochs_seen, 1u);  // epoch 2 is not finished
  EXPECT_EQ(h.epochs.size(), 1u);
  EXPECT_EQ(t.epochs_done(), 1u);
  EXPECT_EQ(t.steps_done(), 11u);
  // The next fit finishes epoch 2 (5 steps left), then runs epoch 3: the same
  // as an uninterrupted run of 3 epochs.
  o.on_step_end = nullptr;
  o.on_epoch_end = nullptr;
  const auto rest = t.fit(d, epochs{2}, o);
  ASSERT_EQ(rest.epochs.size(), 2u);
  EXPECT_EQ(rest.epochs[0].epoch, 2u);
  EXPECT_EQ(rest.epochs[0].steps, 5u);
  auto q = compile<net, batch<8>>(1);
  trainer u{q, sgd{.lr = 0.05f, .momentum = 0.9f}};
  u.fit(d, epochs{3}, o);
  EXPECT_EQ(0, std::memcmp(p.parameters().data(), q.parameters().data(), p.parameters().size_bytes()));
}

TEST(trainer_schedule, the_base_rate_is_what_schedules_multiply) {
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.1f}};
  EXPECT_DOUBLE_EQ(t.base_lr(), double{0.1f});
  t.set_base_lr(0.01);
  std::vector<double> rates;
  t.fit(blobs(16, 1), epochs{1},
        {.progress = progress_mode::none, .on_step_end = [&](const step_report& r) { rates.push_back(r.lr); }});
  EXPECT_FLOAT_EQ(static_cast<float>(rates.front()), 0.01f);
  EXPECT_THROW(t.set_base_lr(0), std::invalid_argument);
}

// Adam, a schedule and a plateau resume bit for bit from a checkpoint.
TEST(trainer_schedule, adam_with_a_schedule_resumes_exactly) {
  const dataset train = blobs(96, 7), val = blobs(30, 8);
  const auto file = std::filesystem::temp_directory_path() / "kiln_schedule_resume.kiln";
  const fit_options o{.validation = &val,
                      .seed = 3,
                      .progress = progress_mode::none,
                      .schedule = linear_warmup{.steps = 5} >> cosine{.steps = 40},
                      .plateau = reduce_on_plateau{.patience = 1}};
  auto a = compile<net, batch<8>>(2);
  trainer ta{a, adamw{.lr = 0.01f}};
  ta.fit(train, epochs{4}, o);

  auto b = compile<net, batch<8>>(2);
  trainer tb{b, adamw{.lr = 0.01f}};
  tb.fit(train, epochs{2}, o);
  tb.save(file, o.seed);
  auto c = compile<net, batch<8>>(9);
  trainer tc{c, adamw{.lr = 0.01f}};
  tc.load(file);
  tc.fit(train, epochs{2}, o);
  std::filesystem::remove(file);
  EXPECT_EQ(0, std::memcmp(a.parameters().data(), c.parameters().data(), a.parameters().size_bytes()));
}
}  // namespace
