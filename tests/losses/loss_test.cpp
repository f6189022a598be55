// The losses' values against their definitions, their stability, and their
// errors. (Their gradients are checked in layers/gradient_test.cpp.)
#include <kiln/losses/mse.hpp>
#include <kiln/losses/softmax_cross_entropy.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace {
using ce3 = kiln::softmax_cross_entropy<3>::bind<kiln::shape<3>>;
using mse2 = kiln::mse::bind<kiln::shape<2>>;

TEST(softmax_cross_entropy, value_is_mean_negative_log_softmax) {
  const std::vector<double> z{1, 2, 3, /* sample 2 */ 0, 0, -1};
  const std::vector<std::uint32_t> t{2, 0};
  std::vector<double> dz(6);
  const auto r = ce3::evaluate(z.data(), t.data(), 2, 2, dz.data());
  const double l1 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3;
  const double l2 = std::log(2 + std::exp(-1.0));
  EXPECT_NEAR(r.loss, (l1 + l2) / 2, 1e-12);
  EXPECT_EQ(r.samples, 2u);
  EXPECT_EQ(r.correct, 2u);  // argmax 2 for sample 1, 0 (first of a tie) for sample 2
  // Each column's gradient is (softmax − onehot)/2: it sums to zero.
  EXPECT_NEAR(dz[0] + dz[1] + dz[2], 0, 1e-15);
  EXPECT_NEAR(dz[2], (std::exp(3 - (l1 + 3)) - 1) / 2, 1e-12);
}

TEST(softmax_cross_entropy, is_stable_for_huge_logits) {
  const std::vector<float> z{1000, 0, -1000};
  const std::uint32_t t = 1;
  std::vector<float> dz(3);
  const auto r = ce3::evaluate(z.data(), &t, 1, 1, dz.data());
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(r.loss, 1000, 1e-3);
  EXPECT_NEAR(dz[0], 1, 1e-6);
  EXPECT_NEAR(dz[1], -1, 1e-6);
}

TEST(softmax_cross_entropy, padding_is_masked) {
  const std::vector<double> z{1, 2, 3, 50, -50, 7};
  const std::vector<std::uint32_t> t{0, 99};  // the padded label is not even checked
  std::vector<double> dz(6, 42.0);
  const auto r = ce3::evaluate(z.data(), t.data(), 2, 1, dz.data());
  EXPECT_EQ(r.samples, 1u);
  EXPECT_NEAR(r.loss, std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1, 1e-12);
  EXPECT_EQ(dz[3], 0);
  EXPECT_EQ(dz[4], 0);
  EXPECT_EQ(dz[5], 0);
}

TEST(softmax_cross_entropy, label_out_of_range_names_sample_and_label) {
  const std::vector<double> z(6, 0.0);
  const std::vector<std::uint32_t> t{1, 3};
  try {
    ce3::evaluate(z.data(), t.data(), 2, 2, static_cast<double*>(nullptr));
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::softmax_cross_entropy: label 3 of sample 1 of the batch is out of range: the model has 3 "
                 "classes");
  }
}

TEST(mse, value_and_gradient_follow_pytorch_mean_reduction) {
  const std::vector<double> y{1, 2, 3, 4};
  const std::vector<float> t{0, 2, 5, 4};
  std::vector<double> dy(4);
  const auto r = mse2::evaluate(y.data(), t.data(), 2, 2, dy.data());
  EXPECT_DOUBLE_EQ(r.loss, (1.0 + 0 + 4 + 0) / 4);
  EXPECT_DOUBLE_EQ(dy[0], 2.0 * 1 / 4);
  EXPECT_DOUBLE_EQ(dy[2], 2.0 * -2 / 4);
  const auto masked = mse2::evaluate(y.data(), t.data(), 2, 1, dy.data());
  EXPECT_DOUBLE_EQ(masked.loss, 0.5);
  EXPECT_EQ(dy[2], 0);
}
}  // namespace
