// kiln/metrics.hpp — metrics beyond the loss, accumulated batch by batch.
//
// WHAT IT IS
//   classification_metrics (C classes): fed rows of C scores and their labels
//   (or hard predictions), it gives accuracy, top-k accuracy for every k, the
//   confusion matrix, and each class's precision, recall and F1 with their
//   macro averages.
//   regression_metrics (O outputs per sample): fed predictions and targets,
//   it gives MSE and MAE over every element and R² (each output's, and their
//   mean).
//   trainer::evaluate and fit's validation use them (fit_options::metrics);
//   they work as well on predictions of your own.
//
// INVARIANTS
//   - The constructor allocates (C² + C counts, or 3·O doubles); add() and
//     the queries allocate nothing.
//   - Counts are integers, so accuracy, top-k, the confusion matrix,
//     precision, recall and F1 are exact ratios of counts; sums are doubles,
//     taken in the order added (R² from a running mean and sum of squared
//     deviations per output, Welford's, which does not cancel).
//   - The predicted class is the first of the highest score, as the loss's
//     accuracy takes it; a label's rank counts the classes scored above it
//     and those before it scored equal, so top-1 accuracy is accuracy.
//   - Undefined ratios follow scikit-learn: precision (recall) of a class
//     never predicted (never present) is 0, and the macro averages run over
//     the classes present in the labels or the predictions; R² of a constant
//     target is 1 when predicted exactly, else 0. With nothing added, the
//     ratios are NaN.
//
// ERRORS
//   A label ≥ C, or sizes that do not make whole rows, throw
//   std::out_of_range / std::invalid_argument naming the row and the value;
//   the batch then counts for nothing.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

namespace kiln {

/// Which metrics trainer::evaluate (and fit, on the validation set) adds to
/// a classifier's loss and accuracy. Nothing is asked by default, and then
/// nothing is computed: accuracy comes with the loss. (A regression's MSE,
/// MAE and R² are always computed: they cost one pass over the outputs.)
struct metric_options {
  std::size_t top_k = 0;   ///< also the top-k accuracy (k ≥ 2; 0: off)
  bool per_class = false;  ///< precision, recall and F1 of each class, and their macro averages
  bool confusion = false;  ///< the confusion matrix (rows: the label, columns: the prediction)

  bool any() const noexcept { return top_k > 1 || per_class || confusion; }
};

class classification_metrics {
 public:
  explicit classification_metrics(std::size_t classes)
      : classes_(classes), confusion_(classes * classes), ranks_(classes) {
    if (classes == 0) throw std::invalid_argument("kiln::classification_metrics: the number of classes must be > 0");
  }

  std::size_t classes() const noexcept { return classes_; }

  /// Adds labels.size() predictions: row i of `scores` (C values, logits or
  /// probabilities) scores the classes for label i.
  template <class T>
  void add(std::span<const T> scores, std::span<const std::uint32_t> labels) {
    if (scores.size() != labels.size() * classes_) {
      throw std::invalid_argument(fmt::format(
          "kiln::classification_metrics::add: {} scores for {} labels; each label needs a row of {} (the classes)",
          scores.size(), labels.size(), classes_));
    }
    for (std::size_t i = 0; i < labels.size(); ++i) check_label(labels[i], i);  // all first: a bad batch counts nothing
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const std::uint32_t label = labels[i];
      const T* row = scores.data() + i * classes_;
      const std::size_t predicted = static_cast<std::size_t>(std::max_element(row, row + classes_) - row);
      std::size_t rank = 0;  // classes ranked before the label
      for (std::size_t c = 0; c < classes_; ++c) rank += row[c] > row[label] || (c < label && row[c] == row[label]);
      ++ranks_[rank];
      ++confusion_[label * classes_ + predicted];
      ++ranked_;
    }
  }

  /// Adds one hard prediction of your own (it counts for everything but
  /// top-k, which needs scores).
  void add(std::uint32_t predicted, std::uint32_t label) {
    check_label(predicted, 0, "predicted class");
    ++confusion_[check_label(label, 0) * classes_ + predicted];
  }

  /// Predictions added.
  std::uint64_t count() const noexcept {
    std::uint64_t n = 0;
    for (const auto c : confusion_) n += c;
    return n;
  }
  std::uint64_t correct() const noexcept {
    std::uint64_t n = 0;
    for (std::size_t c = 0; c < classes_; ++c) n += confusion_[c * classes_ + c];
    return n;
  }
  double accuracy() const noexcept { return ratio(correct(), count()); }

  /// The share of the predictions added with scores whose label is among
  /// the k classes scored highest.
  double top_k_accuracy(std::size_t k) const noexcept {
    std::uint64_t hits = 0;
    for (std::size_t r = 0; r < std::min(k, classes_); ++r) hits += ranks_[r];
    return ratio(hits, ranked_);
  }

  /// Predictions of class `predicted` whose label was `actual`.
  std::uint64_t confusion(std::size_t actual, std::size_t predicted) const {
    return confusion_.at(actual * classes_ + predicted);
  }
  /// The whole matrix, row-major: row = label, column = prediction.
  std::span<const std::uint64_t> confusion_matrix() const noexcept { return confusion_; }

  /// Predictions whose label is `c` (scikit-learn's support).
  std::uint64_t support(std::size_t c) const noexcept { return line_sum(c * classes_, 1); }
  /// Predictions of class `c`.
  std::uint64_t predicted(std::size_t c) const noexcept { return line_sum(c, classes_); }

  double precision(std::size_t c) const noexcept { return zero_if_undefined(hits(c), predicted(c)); }
  double recall(std::size_t c) const noexcept { return zero_if_undefined(hits(c), support(c)); }
  double f1(std::size_t c) const noexcept {
    // 2·tp / (2·tp + fp + fn): the harmonic mean of precision and recall, from counts.
    return zero_if_undefined(2 * hits(c), support(c) + predicted(c));
  }
  double macro_precision() const noexcept { return macro(&classification_metrics::precision); }
  double macro_recall() const noexcept { return macro(&classification_metrics::recall); }
  double macro_f1() const noexcept { return macro(&classification_metrics::f1); }

  /// Adds another accumulator's counts (of as many classes).
  void merge(const classification_metrics& o) {
    if (o.classes_ != classes_)
      throw std::invalid_argument(
          fmt::format("kiln::classification_metrics::merge: {} classes into {}", o.classes_, classes_));
    for (std::size_t i = 0; i < confusion_.size(); ++i) confusion_[i] += o.confusion_[i];
    for (std::size_t i = 0; i < ranks_.size(); ++i) ranks_[i] += o.ranks_[i];
    ranked_ += o.ranked_;
  }
  void reset() noexcept {
    std::fill(confusion_.begin(), confusion_.end(), 0);
    std::fill(ranks_.begin(), ranks_.end(), 0);
    ranked_ = 0;
  }

 private:
  std::uint32_t check_label(std::uint32_t v, std::size_t row, const char* what = "label") const {
    if (v >= classes_)
      throw std::out_of_range(fmt::format(
          "kiln::classification_metrics::add: {} {} (row {}) is out of range: there are {} classes (0 to {})", what, v,
          row, classes_, classes_ - 1));
    return v;
  }
  std::uint64_t hits(std::size_t c) const noexcept { return confusion_[c * classes_ + c]; }
  /// The sum of a row (stride 1) or a column (stride classes_) of the matrix.
  std::uint64_t line_sum(std::size_t first, std::size_t stride) const noexcept {
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < classes_; ++i) n += confusion_[first + i * stride];
    return n;
  }
  static double ratio(std::uint64_t a, std::uint64_t b) noexcept {
    return b ? static_cast<double>(a) / static_cast<double>(b) : std::numeric_limits<double>::quiet_NaN();
  }
  static double zero_if_undefined(std::uint64_t a, std::uint64_t b) noexcept {
    return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
  }
  double macro(double (classification_metrics::*per_class)(std::size_t) const noexcept) const noexcept {
    double sum = 0;
    std::size_t present = 0;
    for (std::size_t c = 0; c < classes_; ++c) {
      if (support(c) == 0 && predicted(c) == 0) continue;
      sum += (this->*per_class)(c);
      ++present;
    }
    return present ? sum / static_cast<double>(present) : std::numeric_limits<double>::quiet_NaN();
  }

  std::size_t classes_;
  std::vector<std::uint64_t> confusion_;  ///< classes × classes, row = label
  std::vector<std::uint64_t> ranks_;      ///< how many labels were ranked r-th (0: first)
  std::uint64_t ranked_ = 0;              ///< predictions added with scores
};

class regression_metrics {
 public:
  explicit regression_metrics(std::size_t outputs = 1)
      : outputs_(outputs), mean_(outputs), m2_(outputs), sse_(outputs) {
    if (outputs == 0) throw std::invalid_argument("kiln::regression_metrics: the number of outputs must be > 0");
  }

  std::size_t outputs() const noexcept { return outputs_; }

  /// Adds predictions.size() / outputs samples: row i of `predictions`
  /// against row i of `targets`.
  template <class T, class U>
  void add(std::span<const T> predictions, std::span<const U> targets) {
    if (predictions.size() != targets.size() || predictions.size() % outputs_ != 0) {
      throw std::invalid_argument(
          fmt::format("kiln::regression_metrics::add: {} predictions for {} targets; both must be whole rows of {} "
                      "(the outputs) and of one size",
                      predictions.size(), targets.size(), outputs_));
    }
    for (std::size_t i = 0; i < predictions.size(); i += outputs_) {
      ++n_;
      for (std::size_t o = 0; o < outputs_; ++o) {
        const double y = static_cast<double>(predictions[i + o]), t = static_cast<double>(targets[i + o]);
        const double e = y - t;
        sse_[o] += e * e;
        sae_ += std::abs(e);
        const double d = t - mean_[o];  // Welford: the targets' mean and sum of squared deviations
        mean_[o] += d / static_cast<double>(n_);
        m2_[o] += d * (t - mean_[o]);
      }
    }
  }

  /// Samples added.
  std::uint64_t count() const noexcept { return n_; }
  /// Mean over every element of (prediction − target)².
  double mse() const noexcept {
    double s = 0;
    for (const double v : sse_) s += v;
    return per_element(s);
  }
  /// Mean over every element of |prediction − target|.
  double mae() const noexcept { return per_element(sae_); }
  /// 1 − Σ(y − t)² / Σ(t − mean t)² of one output.
  double r2(std::size_t output) const {
    if (n_ == 0) return std::numeric_limits<double>::quiet_NaN();
    const double res = sse_.at(output), tot = m2_[output];
    if (tot == 0) return res == 0 ? 1.0 : 0.0;
    return 1.0 - res / tot;
  }
  /// The mean of the outputs' R² (scikit-learn's uniform average).
  double r2() const noexcept {
    if (n_ == 0) return std::numeric_limits<double>::quiet_NaN();
    double s = 0;
    for (std::size_t o = 0; o < outputs_; ++o) s += r2(o);
    return s / static_cast<double>(outputs_);
  }

  /// Adds another accumulator's samples (of as many outputs; Chan's
  /// formula for the combined mean and deviations).
  void merge(const regression_metrics& b) {
    if (b.outputs_ != outputs_)
      throw std::invalid_argument(
          fmt::format("kiln::regression_metrics::merge: {} outputs into {}", b.outputs_, outputs_));
    if (b.n_ == 0) return;
    const double na = static_cast<double>(n_), nb = static_cast<double>(b.n_), n = na + nb;
    for (std::size_t o = 0; o < outputs_; ++o) {
      const double d = b.mean_[o] - mean_[o];
      m2_[o] += b.m2_[o] + d * d * na * nb / n;
      mean_[o] += d * nb / n;
      sse_[o] += b.sse_[o];
    }
    sae_ += b.sae_;
    n_ += b.n_;
  }
  void reset() noexcept {
    n_ = 0;
    sae_ = 0;
    for (auto* v : {&mean_, &m2_, &sse_}) std::fill(v->begin(), v->end(), 0.0);
  }

 private:
  double per_element(double sum) const noexcept {
    return n_ ? sum / (static_cast<double>(n_) * static_cast<double>(outputs_))
              : std::numeric_limits<double>::quiet_NaN();
  }

  std::size_t outputs_;
  std::uint64_t n_ = 0;
  double sae_ = 0;                       ///< Σ |y − t| over every element
  std::vector<double> mean_, m2_, sse_;  ///< per output: targets' mean, Σ (t − mean)², Σ (y − t)²
};

}  // namespace kiln
