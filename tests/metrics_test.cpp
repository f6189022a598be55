// kiln/metrics.hpp on cases computed by hand (and checked against
// scikit-learn 1.2: precision_score, recall_score, f1_score,
// top_k_accuracy_score, mean_squared_error, mean_absolute_error, r2_score).
#include <kiln/metrics.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {
using kiln::classification_metrics;
using kiln::regression_metrics;

// Six predictions over three classes. Row 3 ties classes 0 and 1: the first
// (0) is predicted, and class 0 ranks before label 1.
const std::vector<float> scores = {2, 1, 0, 0.5f, 1.5f, 1, 1, 3, 2, 1, 1, 0, 0, 2, 1, 3, 0, 1};
const std::vector<std::uint32_t> labels = {0, 0, 1, 1, 2, 2};
// predicted: 0, 1, 1, 0, 1, 0; the label's rank: 0, 2, 0, 1, 1, 1

TEST(classification_metrics, hand_computed_counts_and_ratios) {
  classification_metrics m(3);
  m.add(std::span<const float>(scores), std::span<const std::uint32_t>(labels));
  EXPECT_EQ(m.count(), 6u);
  EXPECT_EQ(m.correct(), 2u);
  EXPECT_DOUBLE_EQ(m.accuracy(), 2.0 / 6);
  EXPECT_DOUBLE_EQ(m.top_k_accuracy(1), 2.0 / 6);  // top-1 is accuracy
  EXPECT_DOUBLE_EQ(m.top_k_accuracy(2), 5.0 / 6);
  EXPECT_DOUBLE_EQ(m.top_k_accuracy(3), 1.0);
  EXPECT_DOUBLE_EQ(m.top_k_accuracy(9), 1.0);
  const std::vector<std::uint64_t> confusion = {1, 1, 0, 1, 1, 0, 1, 1, 0};  // rows: label
  EXPECT_EQ(std::vector<std::uint64_t>(m.confusion_matrix().begin(), m.confusion_matrix().end()), confusion);
  EXPECT_EQ(m.confusion(1, 0), 1u);
  EXPECT_EQ(m.support(2), 2u);
  EXPECT_EQ(m.predicted(2), 0u);
  EXPECT_DOUBLE_EQ(m.precision(0), 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.precision(2), 0.0);  // never predicted: 0, as scikit-learn's zero_division=0
  EXPECT_DOUBLE_EQ(m.recall(1), 0.5);
  EXPECT_DOUBLE_EQ(m.recall(2), 0.0);
  EXPECT_DOUBLE_EQ(m.f1(0), 0.4);
  EXPECT_DOUBLE_EQ(m.f1(2), 0.0);
  EXPECT_DOUBLE_EQ(m.macro_precision(), 2.0 / 9);
  EXPECT_DOUBLE_EQ(m.macro_recall(), 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.macro_f1(), 0.8 / 3);
}

TEST(classification_metrics, a_class_absent_from_labels_and_predictions_is_left_out_of_macro_averages) {
  classification_metrics three(3), five(5);
  std::vector<double> wide;  // the same scores with two more classes scored lowest
  for (std::size_t i = 0; i < labels.size(); ++i) {
    for (int c = 0; c < 3; ++c) wide.push_back(scores[i * 3 + c]);
    wide.push_back(-5);
    wide.push_back(-5);
  }
  three.add(std::span<const float>(scores), std::span<const std::uint32_t>(labels));
  five.add(std::span<const double>(wide), std::span<const std::uint32_t>(labels));
  EXPECT_DOUBLE_EQ(five.macro_f1(), three.macro_f1());
  EXPECT_DOUBLE_EQ(five.macro_precision(), three.macro_precision());
  EXPECT_DOUBLE_EQ(five.top_k_accuracy(2), three.top_k_accuracy(2));
}

TEST(classification_metrics, batches_and_merges_give_the_same_counts_as_one_pass) {
  classification_metrics whole(3), batched(3), a(3), b(3);
  const std::span<const float> s(scores);
  const std::span<const std::uint32_t> l(labels);
  whole.add(s, l);
  batched.add(s.first(6), l.first(2));
  batched.add(s.subspan(6), l.subspan(2));
  a.add(s.first(9), l.first(3));
  b.add(s.subspan(9), l.subspan(3));
  a.merge(b);
  for (const auto* m : {&batched, &a}) {
    EXPECT_TRUE(
        std::equal(m->confusion_matrix().begin(), m->confusion_matrix().end(), whole.confusion_matrix().begin()));
    EXPECT_EQ(m->top_k_accuracy(2), whole.top_k_accuracy(2));
  }
  a.reset();
  EXPECT_EQ(a.count(), 0u);
  EXPECT_TRUE(std::isnan(a.accuracy()));
  EXPECT_TRUE(std::isnan(a.macro_f1()));
}

TEST(classification_metrics, hard_predictions_count_for_all_but_top_k) {
  classification_metrics m(3);
  const std::uint32_t predicted[] = {0, 1, 1, 0, 1, 0};
  for (std::size_t i = 0; i < 6; ++i) m.add(predicted[i], labels[i]);
  EXPECT_DOUBLE_EQ(m.accuracy(), 2.0 / 6);
  EXPECT_DOUBLE_EQ(m.macro_f1(), 0.8 / 3);
  EXPECT_TRUE(std::isnan(m.top_k_accuracy(2)));  // no scores were given
}

TEST(classification_metrics, bad_input_is_refused_naming_it) {
  classification_metrics m(3);
  const std::vector<std::uint32_t> bad = {0, 3};
  const std::vector<float> two_rows(6, 0.0f);
  try {
    m.add(std::span<const float>(two_rows), std::span<const std::uint32_t>(bad));
    FAIL() << "label 3 of 3 classes was taken";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::classification_metrics::add: label 3 (row 1) is out of range: there are 3 classes (0 to 2)");
  }
  try {
    m.add(std::span<const float>(two_rows).first(5), std::span<const std::uint32_t>(bad));
    FAIL() << "5 scores for 2 labels were taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::classification_metrics::add: 5 scores for 2 labels; each label needs a row of 3 (the classes)");
  }
  EXPECT_THROW(m.add(std::uint32_t{7}, std::uint32_t{0}), std::out_of_range);
  EXPECT_THROW(classification_metrics(0), std::invalid_argument);
  EXPECT_THROW(m.merge(classification_metrics(4)), std::invalid_argument);
  EXPECT_EQ(m.count(), 0u);  // a batch with a bad label counts for nothing, not even its good rows
}

// Three samples of two outputs.
const std::vector<float> predictions = {1, 2, 3, 5, 2, 0};
const std::vector<float> targets = {0, 2, 2, 6, 4, 1};

TEST(regression_metrics, hand_computed_mse_mae_and_r2) {
  regression_metrics m(2);
  m.add(std::span<const float>(predictions), std::span<const float>(targets));
  EXPECT_EQ(m.count(), 3u);
  EXPECT_DOUBLE_EQ(m.mse(), 8.0 / 6);
  EXPECT_DOUBLE_EQ(m.mae(), 1.0);
  EXPECT_DOUBLE_EQ(m.r2(0), 1 - 6.0 / 8);   // targets 0 2 4: Σ(t − 2)² = 8, Σ(y − t)² = 6
  EXPECT_DOUBLE_EQ(m.r2(1), 1 - 2.0 / 14);  // targets 2 6 1: Σ(t − 3)² = 14, Σ(y − t)² = 2
  EXPECT_DOUBLE_EQ(m.r2(), (0.25 + 12.0 / 14) / 2);
}

TEST(regression_metrics, batches_and_merges_agree_and_a_constant_target_follows_scikit_learn) {
  regression_metrics whole(2), a(2), b(2);
  whole.add(std::span<const float>(predictions), std::span<const float>(targets));
  a.add(std::span<const float>(predictions).first(2), std::span<const float>(targets).first(2));
  b.add(std::span<const float>(predictions).subspan(2), std::span<const float>(targets).subspan(2));
  a.merge(b);
  EXPECT_EQ(a.count(), 3u);
  EXPECT_DOUBLE_EQ(a.mse(), whole.mse());
  EXPECT_DOUBLE_EQ(a.mae(), whole.mae());
  EXPECT_NEAR(a.r2(), whole.r2(), 1e-15);

  regression_metrics constant(1);
  const std::vector<double> t = {5, 5, 5}, exact = {5, 5, 5}, off = {5, 6, 5};
  constant.add(std::span<const double>(exact), std::span<const double>(t));
  EXPECT_EQ(constant.r2(), 1.0);
  constant.reset();
  EXPECT_TRUE(std::isnan(constant.r2()));
  EXPECT_TRUE(std::isnan(constant.mse()));
  constant.add(std::span<const double>(off), std::span<const double>(t));
  EXPECT_EQ(constant.r2(), 0.0);
}

TEST(regression_metrics, r2_does_not_cancel_on_large_offsets) {
  // Targets 1e9 + {0, 1, 2}: Σt² − (Σt)²/n loses every digit in double; Welford keeps them.
  regression_metrics m(1);
  const std::vector<double> t = {1e9, 1e9 + 1, 1e9 + 2}, y = {1e9, 1e9 + 1, 1e9 + 1};
  m.add(std::span<const double>(y), std::span<const double>(t));
  EXPECT_DOUBLE_EQ(m.r2(), 1 - 1.0 / 2);
}

TEST(regression_metrics, rows_that_do_not_match_are_refused) {
  regression_metrics m(2);
  const std::vector<float> three(3, 0.0f), four(4, 0.0f);
  try {
    m.add(std::span<const float>(three), std::span<const float>(three));
    FAIL() << "3 values for 2 outputs were taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::regression_metrics::add: 3 predictions for 3 targets; both must be whole rows of 2 (the "
                 "outputs) and of one size");
  }
  EXPECT_THROW(m.add(std::span<const float>(four), std::span<const float>(three)), std::invalid_argument);
  EXPECT_THROW(regression_metrics(0), std::invalid_argument);
  EXPECT_EQ(m.count(), 0u);
}
}  // namespace
