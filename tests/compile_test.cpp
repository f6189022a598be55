// The program: initialisation, parameter access, copies, and the products at
// realistic sizes (Eigen's kernel with kiln's packing space) against a plain loop.
#include <kiln/compile.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/relu.hpp>
#include <kiln/losses/mse.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "support/gradient_check.hpp"

namespace {
using namespace kiln;
using mlp = model<input<784>, dense<256>, relu, dense<128>, relu, dense<10>>;

TEST(program, same_seed_same_bits_other_seed_other_bits) {
  auto a = compile<mlp, batch<8>>(3);
  auto b = compile<mlp, batch<8>>(3);
  auto c = compile<mlp, batch<8>>(4);
  ASSERT_EQ(a.parameters().size(), b.parameters().size());
  EXPECT_EQ(0, std::memcmp(a.parameters().data(), b.parameters().data(), a.parameters().size_bytes()));
  EXPECT_NE(0, std::memcmp(a.parameters().data(), c.parameters().data(), a.parameters().size_bytes()));
}

TEST(program, initialisation_follows_he_and_glorot) {
  auto p = compile<mlp, batch<8>>(9);
  auto moments = [](std::span<const float> w) {
    double s = 0, s2 = 0;
    for (float v : w) s += v, s2 += double(v) * v;
    const double n = static_cast<double>(w.size()), mean = s / n;
    return std::pair{mean, std::sqrt(s2 / n - mean * mean)};
  };
  auto [m1, sd1] = moments(p.layer_parameter<1, 0>());  // He before relu: sd = sqrt(2/784)
  EXPECT_NEAR(m1, 0, 0.002);
  EXPECT_NEAR(sd1, std::sqrt(2.0 / 784), 0.02 * std::sqrt(2.0 / 784));
  auto last = p.layer_parameter<5, 0>();  // Glorot before the loss: U(±sqrt(6/138))
  const float limit = static_cast<float>(std::sqrt(6.0 / (128 + 10)));
  for (float v : last) ASSERT_LE(std::abs(v), limit);
  auto [m5, sd5] = moments(last);
  EXPECT_NEAR(sd5, limit / std::sqrt(3.0), 0.05 * limit);
  for (float v : p.layer_parameter<1, 1>()) ASSERT_EQ(v, 0.0f);  // biases start at zero
}

TEST(program, parameter_views_partition_the_flat_buffer) {
  auto p = compile<mlp, batch<4>>(1);
  const auto w1 = p.layer_parameter<1, 0>();
  const auto b3 = p.layer_parameter<3, 1>();
  const auto w3 = p.layer_parameter<3, 0>();
  const auto g3 = p.layer_gradient<3, 0>();
  EXPECT_EQ(w1.size(), 784u * 256);
  EXPECT_EQ(b3.size(), 128u);
  EXPECT_EQ(w1.data(), p.parameters().data());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p.parameters().data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(w3.data()) % 64, 0u);
  EXPECT_EQ(g3.data() - p.gradients().data(), w3.data() - p.parameters().data());
}

TEST(program, a_copy_owns_its_buffers) {
  auto p = compile<mlp, batch<4>>(1);
  auto q = p;
  EXPECT_NE(p.parameters().data(), q.parameters().data());
  EXPECT_EQ(0, std::memcmp(p.parameters().data(), q.parameters().data(), p.parameters().size_bytes()));
  q.parameters()[0] += 1;
  EXPECT_NE(p.parameters()[0], q.parameters()[0]);
  // Both run.
  std::vector<std::uint32_t> t(4, 1);
  p.forward();
  q.forward();
  EXPECT_TRUE(std::isfinite(p.backward(t).loss));
  EXPECT_TRUE(std::isfinite(q.backward(t).loss));
}

TEST(program, rejects_too_few_targets_or_too_many_valid_samples) {
  auto p = compile<mlp, batch<4>>(1);
  p.forward();
  std::vector<std::uint32_t> t(3, 0);
  EXPECT_THROW(p.backward(t), std::invalid_argument);
  std::vector<std::uint32_t> t4(4, 0);
  EXPECT_THROW(p.evaluate(t4, 5), std::invalid_argument);
  EXPECT_NO_THROW(p.evaluate(t, 3));
}

// The products at the MLP's real sizes against plain loops in double.
TEST(program, dense_products_at_full_size_match_plain_loops) {
  using net = model<input<784>, dense<256>>;
  constexpr std::size_t B = 64, I = 784, O = 256;
  auto p = compile<net, batch<B>, mse>(5);
  rng g(17);
  for (auto& x : p.input()) x = static_cast<float>(g.uniform(-1, 1));
  for (auto& b : p.layer_parameter<1, 1>()) b = static_cast<float>(g.uniform(-1, 1));
  std::vector<float> t(B * O);
  for (auto& v : t) v = static_cast<float>(g.uniform(-1, 1));
  p.forward();
  p.backward(t);
  const auto W = p.layer_parameter<1, 0>();
  const auto b = p.layer_parameter<1, 1>();
  const auto x = p.input();
  const auto y = p.output();
  std::vector<double> dy(B * O);
  double max_err = 0;
  for (std::size_t s = 0; s < B; ++s)
    for (std::size_t o = 0; o < O; ++o) {
      double acc = b[o];
      for (std::size_t i = 0; i < I; ++i) acc += double(W[o * I + i]) * x[s * I + i];
      max_err = std::max(max_err, std::abs(acc - y[s * O + o]));
      dy[s * O + o] = 2.0 * (double(y[s * O + o]) - t[s * O + o]) / (B * O);
    }
  EXPECT_LT(max_err, 1e-4);
  const auto dW = p.layer_gradient<1, 0>();
  double max_grad_err = 0, max_grad = 0;
  for (std::size_t o = 0; o < O; o += 7)
    for (std::size_t i = 0; i < I; i += 5) {
      double acc = 0;
      for (std::size_t s = 0; s < B; ++s) acc += dy[s * O + o] * x[s * I + i];
      max_grad_err = std::max(max_grad_err, std::abs(acc - dW[o * I + i]));
      max_grad = std::max(max_grad, std::abs(acc));
    }
  EXPECT_LT(max_grad_err, 1e-5 * max_grad);
}

TEST(program, deep_mlp_gradients_match_finite_differences_in_double) {
  using net = model<input<20>, dense<16>, relu, dense<12>, relu, dense<4>>;
  auto p = compile<net, batch<5>, precision<double>>(21);
  const auto t = kiln::testing::random_batch(p, 8);
  kiln::testing::expect_gradients_match_finite_differences(p, t);
}
}  // namespace
