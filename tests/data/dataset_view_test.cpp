// The trainer reads the user's own memory through a dataset_view, and any
// sample_source row by row: same bits as a dataset, no copy, checked.
#include <kiln/data/dataset_view.hpp>
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include "support/blobs.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {
using namespace kiln;
using net = model<input<2, 2>, flatten, dense<8>, relu, dense<3>>;
using kiln::testing::blobs;

fit_options quiet(std::uint64_t seed = 1) { return {.seed = seed, .progress = progress_mode::none}; }

std::vector<float> parameters_of(auto& p) { return {p.parameters().begin(), p.parameters().end()}; }

TEST(dataset_view, trains_to_the_same_bits_as_the_dataset_it_mirrors) {
  const dataset d = blobs(200, 1);
  // The user's own arrays, in memory kiln does not own.
  const std::vector<float> x = d.features;
  const std::vector<std::uint32_t> y = d.labels;
  const dataset_view v{.name = "mine", .sample_shape = {2, 2}, .features = x, .labels = y};
  EXPECT_EQ(v.features.data(), x.data());  // no copy
  EXPECT_EQ(v.size(), 200u);

  auto p = compile<net, batch<16>>(3);
  auto q = compile<net, batch<16>>(3);
  trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f}};
  trainer u{q, sgd{.lr = 0.05f, .momentum = 0.9f}};
  const auto a = t.fit(d, epochs{3}, quiet());
  const auto b = u.fit(v, epochs{3}, quiet());
  ASSERT_EQ(a.epochs.size(), b.epochs.size());
  for (std::size_t e = 0; e < a.epochs.size(); ++e) EXPECT_EQ(a.epochs[e].train.loss, b.epochs[e].train.loss);
  EXPECT_EQ(parameters_of(p), parameters_of(q));
  const auto ea = t.evaluate(d), eb = u.evaluate(v);
  EXPECT_EQ(ea.loss, eb.loss);
  EXPECT_EQ(ea.samples, 200u);
  EXPECT_GT(eb.accuracy, 0.9);
  EXPECT_EQ(t.predict(d), u.predict(v));
}

TEST(dataset_view, regression_targets_in_double_precision) {
  // y = x0 − x1, as float targets, read into a double program through one row of floats.
  std::vector<float> x, y;
  rng g(5);
  for (int i = 0; i < 256; ++i) {
    const float a = static_cast<float>(g.uniform(-1, 1)), b = static_cast<float>(g.uniform(-1, 1));
    x.insert(x.end(), {a, b});
    y.push_back(a - b);
  }
  const dataset_view v{.name = "difference", .sample_shape = {2}, .features = x, .targets = y, .target_size = 1};
  using lin = model<input<2>, dense<1>>;
  auto p = compile<lin, batch<16>, precision<double>, mse>(1);
  trainer t{p, sgd{.lr = 0.1f, .momentum = 0.9f}};
  const double before = t.evaluate(v).loss;
  t.fit(v, epochs{20}, quiet());
  const double after = t.evaluate(v).loss;
  EXPECT_LT(after, before / 100) << before << " → " << after;
}

TEST(dataset_view, a_view_that_does_not_divide_into_samples_is_refused) {
  const std::vector<float> x(10, 0.f);
  const std::vector<std::uint32_t> y(3, 0);
  dataset_view v{.name = "ten", .sample_shape = {4}, .features = x};
  EXPECT_THROW(v.validate(), std::invalid_argument);
  v.sample_shape = {2, 1};
  v.labels = y;  // 5 samples, 3 labels
  try {
    v.validate();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "kiln::dataset_view 'ten': 3 labels for 5 samples");
  }
  auto p = compile<net, batch<4>>(1);
  trainer t{p, sgd{.lr = 0.1f}};
  v.labels = {};
  try {
    t.fit(v, epochs{1}, quiet());
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::trainer: the training set 'ten' has samples of 2 values, but the model's input shape<2, 2> "
                 "takes 4");
  }
}

/// A sample source of one's own: sample i is computed, not stored, and the
/// reads are counted.
struct computed {
  std::array<std::size_t, 2> shape{2, 2};
  std::size_t n = 96;
  mutable std::size_t feature_reads = 0, label_reads = 0;
  source_info info() const { return {"computed", shape, n, 1, 0}; }
  void read_features(std::size_t i, const sample_pass&, std::span<float> row) const {
    ++feature_reads;
    for (std::size_t k = 0; k < row.size(); ++k) row[k] = k == i % 3 ? 2.f : 0.f;
  }
  void read_labels(std::size_t i, std::span<std::uint32_t> out) const {
    ++label_reads;
    out[0] = static_cast<std::uint32_t>(i % 3);
  }
  void read_targets(std::size_t, std::span<float>) const {}
};
static_assert(sample_source<computed>);

TEST(sample_source, the_trainer_gathers_every_batch_through_it) {
  const computed src;
  auto p = compile<net, batch<8>, replicate<2>>(1);
  trainer t{p, sgd{.lr = 0.1f, .momentum = 0.9f}};
  t.fit(src, epochs{4}, quiet());
  // 96 samples in steps of 16: 6 steps of 16 rows per epoch.
  EXPECT_EQ(src.feature_reads, 4u * 96u);
  EXPECT_EQ(src.label_reads, 4u * 96u + 96u);  // and once per sample per fit, for the range check
  const auto e = t.evaluate(src);
  EXPECT_EQ(e.samples, 96u);
  EXPECT_EQ(e.accuracy, 1.0);
}

TEST(fit_options, the_validation_set_is_any_sample_source) {
  const dataset d = blobs(200, 1), test = blobs(64, 2);
  const dataset_view test_view = test.view();
  const computed own;
  auto p = compile<net, batch<16>>(3);
  auto q = compile<net, batch<16>>(3);
  trainer t{p, sgd{.lr = 0.05f}};
  trainer u{q, sgd{.lr = 0.05f}};
  fit_options by_dataset = quiet(), by_view = quiet();
  by_dataset.validation = &test;
  by_view.validation = &test_view;
  const auto a = t.fit(d, epochs{2}, by_dataset);
  const auto b = u.fit(d, epochs{2}, by_view);
  for (std::size_t e = 0; e < 2; ++e) {
    ASSERT_TRUE(a.epochs[e].validation && b.epochs[e].validation);
    EXPECT_EQ(a.epochs[e].validation->loss, b.epochs[e].validation->loss);  // the same samples, the same bits
    EXPECT_EQ(a.epochs[e].validation->samples, 64u);
  }
  // A source of one's own is read for validation too, every sample once per epoch.
  fit_options by_own = quiet();
  by_own.validation = &own;
  const std::size_t reads = own.feature_reads;
  const auto c = t.fit(d, epochs{1}, by_own);
  EXPECT_EQ(own.feature_reads - reads, 96u);
  EXPECT_EQ(c.epochs.back().validation->samples, 96u);
  EXPECT_FALSE(fit_options{}.validation);
  EXPECT_FALSE(fit_options{.validation = static_cast<const dataset*>(nullptr)}.validation);
}

}  // namespace
