// Reads predictions on stdin and prints kiln/metrics.hpp's values as JSON,
// for tests/reference/sklearn_metrics.py to compare with scikit-learn.
// Input: "C N", then N rows of C scores and a label; "O M", then M rows of O
// predictions and O targets; each part fed in batches of 7 rows.
#include <kiln/metrics.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <span>
#include <vector>

int main() {
  std::size_t classes = 0, n = 0;
  std::cin >> classes >> n;
  std::vector<double> scores(classes * n);
  std::vector<std::uint32_t> labels(n);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < classes; ++c) std::cin >> scores[i * classes + c];
    std::cin >> labels[i];
  }
  std::size_t outputs = 0, m = 0;
  std::cin >> outputs >> m;
  std::vector<float> predictions(outputs * m), targets(outputs * m);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t o = 0; o < outputs; ++o) std::cin >> predictions[i * outputs + o];
    for (std::size_t o = 0; o < outputs; ++o) std::cin >> targets[i * outputs + o];
  }
  if (!std::cin) return 1;

  kiln::classification_metrics c(classes);
  for (std::size_t i = 0; i < n; i += 7) {
    const std::size_t rows = std::min<std::size_t>(7, n - i);
    c.add(std::span<const double>(scores).subspan(i * classes, rows * classes),
          std::span<const std::uint32_t>(labels).subspan(i, rows));
  }
  kiln::regression_metrics r(outputs);
  for (std::size_t i = 0; i < m; i += 7) {
    const std::size_t rows = std::min<std::size_t>(7, m - i);
    r.add(std::span<const float>(predictions).subspan(i * outputs, rows * outputs),
          std::span<const float>(targets).subspan(i * outputs, rows * outputs));
  }
  nlohmann::json j;
  j["accuracy"] = c.accuracy();
  for (std::size_t k = 1; k <= classes; ++k) j["top_k"].push_back(c.top_k_accuracy(k));
  j["confusion"] = std::vector<std::uint64_t>(c.confusion_matrix().begin(), c.confusion_matrix().end());
  for (std::size_t k = 0; k < classes; ++k) {
    j["precision"].push_back(c.precision(k));
    j["recall"].push_back(c.recall(k));
    j["f1"].push_back(c.f1(k));
  }
  j["macro_precision"] = c.macro_precision();
  j["macro_recall"] = c.macro_recall();
  j["macro_f1"] = c.macro_f1();
  j["mse"] = r.mse();
  j["mae"] = r.mae();
  j["r2"] = r.r2();
  for (std::size_t o = 0; o < outputs; ++o) j["r2_each"].push_back(r.r2(o));
  std::cout << j.dump() << "\n";
}
