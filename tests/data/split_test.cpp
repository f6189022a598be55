// A seeded split: the same seed the same split, stratified proportions,
// nothing lost or repeated.
#include <kiln/data/split.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace {
using namespace kiln;

/// n samples of one value each (the sample's index), unbalanced classes.
dataset indexed(std::size_t n) {
  dataset d{"indexed", {1}, {}, {}, {}, 0};
  for (std::size_t i = 0; i < n; ++i) {
    d.features.push_back(static_cast<float>(i));
    d.labels.push_back(i % 7 == 0 ? 0u : i % 3 == 0 ? 1u : 2u);  // three classes of unequal size
  }
  return d;
}

std::map<std::uint32_t, std::size_t> counts(const std::vector<std::uint32_t>& labels) {
  std::map<std::uint32_t, std::size_t> c;
  for (auto l : labels) ++c[l];
  return c;
}

TEST(split, every_sample_lands_once_with_its_label) {
  const dataset d = indexed(1001);
  const auto [train, validation] = split(d, {.validation = 0.25, .seed = 3});
  EXPECT_EQ(train.name, "indexed train");
  EXPECT_EQ(validation.name, "indexed validation");
  EXPECT_EQ(validation.size(), 250u);  // round(1001 × 0.25)
  std::vector<float> all = train.features;
  all.insert(all.end(), validation.features.begin(), validation.features.end());
  std::sort(all.begin(), all.end());
  std::vector<float> expected(1001);
  std::iota(expected.begin(), expected.end(), 0.f);
  EXPECT_EQ(all, expected);
  for (std::size_t i = 0; i < validation.size(); ++i)
    EXPECT_EQ(validation.labels[i], d.labels[static_cast<std::size_t>(validation.features[i])]);
}

TEST(split, the_same_seed_gives_the_same_split_another_seed_another) {
  const dataset d = indexed(500);
  const auto a = split_indices(d.size(), d.labels, {.seed = 9, .stratify = true});
  const auto b = split_indices(d.size(), d.labels, {.seed = 9, .stratify = true});
  const auto c = split_indices(d.size(), d.labels, {.seed = 10, .stratify = true});
  EXPECT_EQ(a.validation, b.validation);
  EXPECT_EQ(a.train, b.train);
  EXPECT_NE(a.validation, c.validation);
  // A fixed seed gives a fixed split on every machine (kiln::rng, no <random>).
  const auto fixed = split_indices(10, {}, {.validation = 0.3, .seed = 1});
  EXPECT_EQ(fixed.validation.size(), 3u);
  EXPECT_EQ(fixed.train.size(), 7u);
}

TEST(split, stratified_keeps_each_class_proportion_within_one_sample) {
  const dataset d = indexed(1003);
  for (double f : {0.1, 0.2, 0.33, 0.5}) {
    const auto [train, validation] = split(d, {.validation = f, .seed = 5, .stratify = true});
    const auto all = counts(d.labels), held = counts(validation.labels), kept = counts(train.labels);
    for (const auto& [label, n] : all) {
      EXPECT_LE(std::abs(static_cast<double>(held.at(label)) - f * static_cast<double>(n)), 1.0)
          << "class " << label << " fraction " << f;
      EXPECT_EQ(held.at(label) + kept.at(label), n);
    }
  }
}

TEST(split, bad_requests_are_refused) {
  const dataset d = indexed(10);
  EXPECT_THROW(split(d, {.validation = 1.5}), std::invalid_argument);
  EXPECT_THROW(split(d, {.validation = -0.1}), std::invalid_argument);
  dataset unlabelled = d;
  unlabelled.labels.clear();
  EXPECT_THROW(split(unlabelled, {.stratify = true}), std::invalid_argument);
  EXPECT_NO_THROW(split(unlabelled, {.validation = 0.5}));
  const std::vector<std::size_t> out_of_range{10};
  EXPECT_THROW(subset(d, out_of_range, "x"), std::out_of_range);
}

}  // namespace
