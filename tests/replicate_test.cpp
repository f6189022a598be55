// replicate<N>: N threads, one workspace each, one parameter buffer; results
// that match one worker at N×B, bit for bit the same on every run, faults
// rethrown without deadlock. Also built with ThreadSanitizer (see CMakeLists).
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include "support/blobs.hpp"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {
using namespace kiln;
using net = model<input<2, 2>, flatten, dense<16>, relu, dense<3>>;
struct shared_w;
using chain =
    model<input<32>, dense<10, no_bias, tied<shared_w>>, dense<32, no_bias>, dense<10, no_bias, tied<shared_w>>>;

dataset blobs(std::size_t n, std::uint64_t seed) { return kiln::testing::blobs(n, seed, {2, 2}); }

const fit_options quiet{.seed = 4, .progress = progress_mode::none};

template <std::size_t N, std::size_t B>
std::vector<float> train_replicated(const dataset& d, std::size_t n_epochs) {
  auto p = compile<net, batch<B>, replicate<N>>(3);
  trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f}};
  t.fit(d, epochs{n_epochs}, quiet);
  return {p.parameters().begin(), p.parameters().end()};
}
template <std::size_t B>
std::vector<float> train_single(const dataset& d, std::size_t n_epochs) {
  auto p = compile<net, batch<B>>(3);
  trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f}};
  t.fit(d, epochs{n_epochs}, quiet);
  return {p.parameters().begin(), p.parameters().end()};
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, double tolerance) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  EXPECT_LT(worst, tolerance);
}

TEST(replicate, matches_one_worker_at_n_times_b) {
  const dataset d = blobs(320, 1);
  expect_close(train_replicated<1, 16>(d, 3), train_single<16>(d, 3), 1e-6);
  expect_close(train_replicated<2, 8>(d, 3), train_single<16>(d, 3), 1e-4);
  expect_close(train_replicated<4, 4>(d, 3), train_single<16>(d, 3), 1e-4);
}

TEST(replicate, same_seed_same_bits_whatever_the_timing) {
  const dataset d = blobs(320, 2);
  for (int run = 0; run < 3; ++run) {
    const auto a = train_replicated<2, 8>(d, 2), b = train_replicated<2, 8>(d, 2);
    EXPECT_EQ(a, b);
    const auto c = train_replicated<4, 4>(d, 2), e = train_replicated<4, 4>(d, 2);  // 4 threads on 2 cores
    EXPECT_EQ(c, e);
  }
}

TEST(replicate, one_named_core_runs_the_same_computation) {
  const dataset d = blobs(96, 3);
  auto pinned = compile<net, batch<16>, replicate<1, 1>>(3);  // one replica, on core 1
  trainer t{pinned, sgd{.lr = 0.05f}};
  t.fit(d, epochs{2}, quiet);
  auto plain = compile<net, batch<16>>(3);
  trainer u{plain, sgd{.lr = 0.05f}};
  u.fit(d, epochs{2}, quiet);
  EXPECT_EQ(0, std::memcmp(pinned.parameters().data(), plain.parameters().data(), plain.parameters().size_bytes()));
}

TEST(replicate, more_replicas_than_cores_warns_and_runs) {
  ::testing::internal::CaptureStderr();
  auto p = compile<net, batch<4>, replicate<8>>(1);
  const std::string warning = ::testing::internal::GetCapturedStderr();
  if (kiln::detail::worker_pool::allowed_cores().size() < 8) {
    EXPECT_NE(warning.find("kiln: replicas 0-7 on a process allowed"), std::string::npos) << warning;
  }
  std::fill(p.input().begin(), p.input().end(), 0.5f);
  p.forward();
  const std::vector<std::uint32_t> t(32, 1);
  EXPECT_TRUE(std::isfinite(p.backward(t).loss));
}

TEST(replicate, ties_hold_across_replicas) {
  auto single = compile<chain, batch<8>, precision<double>>(5);
  auto twin = compile<chain, batch<4>, precision<double>, replicate<2>>(5);
  EXPECT_EQ(twin.layer_parameter<1>().data(), twin.layer_parameter<3>().data());
  rng g(1);
  for (auto& x : single.input()) x = g.uniform(-1, 1);
  std::copy(single.input().begin(), single.input().end(), twin.input().begin());
  std::vector<std::uint32_t> t(8);
  for (auto& v : t) v = static_cast<std::uint32_t>(g.below(10));
  single.forward();
  twin.forward();
  const double l1 = single.backward(t).loss, l2 = twin.backward(t).loss;
  EXPECT_NEAR(l1, l2, 1e-12);
  for (std::size_t i = 0; i < single.gradients().size(); ++i)
    ASSERT_NEAR(single.gradients()[i], twin.gradients()[i], 1e-12) << i;
}

TEST(replicate, evaluation_counts_every_sample_once) {
  const dataset d = blobs(53, 6);  // 53 = 3 × 16 + 5: the last step fills half of replica 0 only
  auto p = compile<net, batch<8>, replicate<2>>(2);
  trainer t{p, sgd{}};
  const evaluation e = t.evaluate(d);
  auto one = compile<net, batch<53>>(0);
  one.assign_parameters(p);
  trainer u{one, sgd{}};
  const evaluation f = u.evaluate(d);
  EXPECT_EQ(e.samples, 53u);
  EXPECT_NEAR(e.loss, f.loss, 1e-6);
  EXPECT_DOUBLE_EQ(e.accuracy, f.accuracy);
  const auto y = t.predict(d), z = u.predict(d);
  ASSERT_EQ(y.size(), z.size());
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], z[i], 1e-5);
}

TEST(replicate, an_exception_in_a_worker_is_rethrown_in_the_caller) {
  struct table;
  using lm = model<input_tokens<4>, embedding<5, 3, tied<table>>, flatten, dense<5>>;
  auto p = compile<lm, batch<2>, replicate<2>>(1);
  std::fill(p.input().begin(), p.input().end(), 1.0f);
  p.input()[13] = 9.0f;  // replica 1 (samples 2 and 3), sample 1 of its batch, position 1
  try {
    p.forward();
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("token 9 at position 1 of sample 1"), std::string::npos) << e.what();
  }
  // The workers are alive and the program still works.
  p.input()[13] = 2.0f;
  p.forward();
  const std::vector<std::uint32_t> t{0, 1, 2, 3};
  EXPECT_TRUE(std::isfinite(p.backward(t).loss));
}  // destroying the program joins its threads

TEST(replicate, an_exception_ends_fit_and_leaves_the_trainer_usable) {
  dataset d = blobs(64, 7);
  d.features[40 * 4] = std::nanf("");  // a NaN: the loss of the step that holds sample 40 is NaN
  auto p = compile<net, batch<8>, replicate<2>>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  fit_options o = quiet;
  o.shuffle = false;
  EXPECT_THROW(t.fit(d, epochs{1}, o), training_error);
  d.features[40 * 4] = 0.0f;
  EXPECT_NO_THROW(t.fit(d, epochs{1}, o));
}

std::size_t threads_of_this_process() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

TEST(replicate, threads_end_with_the_program_even_after_a_fault) {
  const std::size_t before = threads_of_this_process();
  {
    using lm = model<input_tokens<2>, embedding<3, 2>, flatten, dense<3>>;
    auto p = compile<lm, batch<2>, replicate<4>>(1);
    EXPECT_EQ(threads_of_this_process(), before + 3) << "replica 0 runs on the calling thread, 1-3 on threads of their own";
    std::fill(p.input().begin(), p.input().end(), 7.0f);  // every replica fails
    EXPECT_THROW(p.forward(), std::out_of_range);
    auto q = std::move(p);  // a moved program keeps its threads
    EXPECT_EQ(threads_of_this_process(), before + 3);
  }
  // A joined thread's /proc entry can outlive the join by a moment: wait for it.
  for (int i = 0; i < 200 && threads_of_this_process() != before; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(threads_of_this_process(), before);
}

// ---- the static sampler on its own ----------------------------------------
TEST(static_sampler, shards_are_disjoint_equal_and_cover_the_epoch) {
  const static_sampler s{.samples = 103, .batch = 5, .workers = 4, .seed = 9};
  EXPECT_EQ(s.steps(), 5u);  // 103 / 20, the remaining 3 dropped
  const auto order = s.order(1);
  std::multiset<std::size_t> seen;
  std::vector<std::size_t> shard(5);
  for (std::size_t step = 0; step < s.steps(); ++step)
    for (std::size_t w = 0; w < 4; ++w) {
      s.shard(order, step, w, shard);
      seen.insert(shard.begin(), shard.end());
    }
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(std::set<std::size_t>(seen.begin(), seen.end()).size(), 100u);  // no sample twice
  EXPECT_EQ(s.order(1), order);  // (seed, epoch) fixes the order, in every process
  EXPECT_NE(s.order(2), order);
}

TEST(static_sampler, wrap_fills_the_last_step_from_the_start) {
  const static_sampler s{.samples = 10, .batch = 3, .workers = 2, .shuffle = false, .remainder = remainder::wrap};
  EXPECT_EQ(s.steps(), 2u);
  const auto order = s.order(1);
  std::vector<std::size_t> shard(3);
  s.shard(order, 1, 1, shard);
  EXPECT_EQ(shard, (std::vector<std::size_t>{9, 0, 1}));
}

TEST(static_sampler, shards_a_user_supplied_order) {
  const static_sampler s{.samples = 4, .batch = 2, .workers = 2};
  const std::vector<std::size_t> weighted{3, 3, 3, 1, 0, 3, 2, 3};  // e.g. drawn with replacement by weight
  EXPECT_EQ(s.steps(weighted.size()), 2u);
  std::vector<std::size_t> shard(2);
  s.shard(weighted, 1, 0, shard);
  EXPECT_EQ(shard, (std::vector<std::size_t>{0, 3}));
  EXPECT_THROW(s.shard(weighted, 2, 0, shard), std::out_of_range);
  EXPECT_THROW(s.shard(weighted, 0, 2, shard), std::out_of_range);
}
}  // namespace

namespace {
// The fused step (each replica reduces and updates its slice) equals the
// step taken in three calls, bit for bit.
TEST(replicate, train_step_equals_forward_backward_then_update) {
  auto a = compile<net, batch<8>, replicate<2>>(1);
  auto b = a;
  const sgd o{.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f};
  sgd::state<float> sa(a.parameters().size()), sb(b.parameters().size());
  rng g(3);
  std::vector<std::uint32_t> t(16);
  for (int step = 0; step < 3; ++step) {
    for (auto& x : a.input()) x = static_cast<float>(g.uniform(-1, 1));
    std::copy(a.input().begin(), a.input().end(), b.input().begin());
    for (auto& v : t) v = static_cast<std::uint32_t>(g.below(3));
    const auto la = kiln::train_step(a, t, o, sa);
    b.forward();
    const auto lb = b.backward(t);
    sb.step(o, b.parameters(), b.gradients());
    EXPECT_EQ(la.loss, lb.loss);
    ASSERT_EQ(0, std::memcmp(a.parameters().data(), b.parameters().data(), a.parameters().size_bytes()));
    EXPECT_EQ(std::vector<float>(a.output().begin(), a.output().end()),
              std::vector<float>(b.output().begin(), b.output().end()));  // train_step's forward, gathered
  }
  // A non-finite loss skips the update.
  const std::vector<float> before(a.parameters().begin(), a.parameters().end());
  a.input()[3] = std::nanf("");
  EXPECT_TRUE(std::isnan(kiln::train_step(a, t, o, sa).loss));
  EXPECT_EQ(before, std::vector<float>(a.parameters().begin(), a.parameters().end()));
}
}  // namespace
