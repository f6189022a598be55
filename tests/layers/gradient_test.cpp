// Every layer's backward against central finite differences, in double.
// One typed test runs over models that put each layer where its backward
// matters (an activation after a dense layer, flatten before one).
#include <kiln/compile.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/flatten.hpp>
#include <kiln/layers/gelu.hpp>
#include <kiln/layers/layer_norm.hpp>
#include <kiln/layers/relu.hpp>
#include <kiln/layers/sigmoid.hpp>
#include <kiln/layers/softmax.hpp>
#include <kiln/layers/tanh.hpp>
#include <kiln/losses/mse.hpp>

#include <gtest/gtest.h>

#include <string>

#include "../support/gradient_check.hpp"

namespace {
using namespace kiln;

using kiln::testing::case_;

using cases = ::testing::Types<
    case_<model<input<5>, dense<4>>, mse>,                                                        // dense, bias
    case_<model<input<5>, dense<4, no_bias>, dense<3>>, mse>,                                     // dense, no bias
    case_<model<input<5>, dense<6>, relu, dense<3>>, softmax_cross_entropy<3>>,                   // relu
    case_<model<input<5>, dense<6>, kiln::tanh, dense<3>>, softmax_cross_entropy<>>,              // tanh
    case_<model<input<5>, dense<6>, sigmoid, dense<3>>, mse>,                                     // sigmoid
    case_<model<input<2, 3>, flatten, dense<4>, kiln::tanh, dense<3>>, softmax_cross_entropy<>>,  // flatten
    case_<model<input<2, 2, 2>, flatten, dense<7>, relu, dense<5, no_bias>, sigmoid, dense<3>, kiln::tanh>, mse>,
    case_<model<input<5>, dense<6>, gelu, dense<3>>, softmax_cross_entropy<>>,         // gelu
    case_<model<input<5>, dense<4>, softmax>, mse>,                                    // softmax
    case_<model<input<3, 4>, layer_norm, softmax>, mse>,                               // both, by rows
    case_<model<input<5>, dense<6>, layer_norm, dense<3>>, softmax_cross_entropy<>>>;  // layer_norm

struct case_names {
  template <class T>
  static std::string GetName(int i) {
    constexpr const char* names[] = {"dense",     "dense_no_bias", "relu", "tanh",    "sigmoid",
                                     "flatten",   "deep_mixed",    "gelu", "softmax", "layer_norm_softmax_rows",
                                     "layer_norm"};
    return names[i];
  }
};

template <class C>
class gradient : public ::testing::Test {};
TYPED_TEST_SUITE(gradient, cases, case_names);

TYPED_TEST(gradient, matches_finite_differences) { kiln::testing::expect_case_gradients_match<TypeParam, 3>(11); }

TYPED_TEST(gradient, padded_samples_do_not_contribute) {
  auto p = compile<typename TypeParam::model, batch<3>, precision<double>, typename TypeParam::loss>(12);
  auto targets = kiln::testing::random_batch(p, 4);
  kiln::testing::expect_gradients_match_finite_differences(p, targets, /*valid=*/2);
  // Changing the padded sample changes nothing.
  p.forward();
  p.backward(targets, 2);
  const std::vector<double> before(p.gradients().begin(), p.gradients().end());
  auto x = p.input();
  constexpr std::size_t n = decltype(p)::input_size;
  for (std::size_t i = 2 * n; i < 3 * n; ++i) x[i] += 3.0;
  p.forward();
  p.backward(targets, 2);
  EXPECT_EQ(before, std::vector<double>(p.gradients().begin(), p.gradients().end()));
}

// dense forward against the definition y = W·x + b with W row-major [out, in].
TEST(dense, forward_is_w_x_plus_b) {
  using net = model<input<3>, dense<2>>;
  auto p = compile<net, batch<2>, precision<double>, mse>(1);
  auto w = p.layer_parameter<1, 0>();
  auto b = p.layer_parameter<1, 1>();
  ASSERT_EQ(w.size(), 6u);
  ASSERT_EQ(b.size(), 2u);
  const double W[2][3] = {{1, 2, 3}, {-1, 0.5, 2}};
  std::copy(&W[0][0], &W[0][0] + 6, w.begin());
  b[0] = 0.25;
  b[1] = -1;
  const double x[2][3] = {{1, 0, -1}, {2, 3, 4}};
  std::copy(&x[0][0], &x[0][0] + 6, p.input().begin());
  p.forward();
  const auto y = p.output();
  for (int s = 0; s < 2; ++s)
    for (int o = 0; o < 2; ++o)
      EXPECT_DOUBLE_EQ(y[s * 2 + o], W[o][0] * x[s][0] + W[o][1] * x[s][1] + W[o][2] * x[s][2] + b[o]);
}

TEST(activations, forward_values) {
  auto check = [](auto program, auto fn) {
    auto x = program.input();
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = -2.0 + 0.5 * static_cast<double>(i);
    program.forward();
    for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(program.output()[i], fn(x[i]), 1e-12) << i;
  };
  check(compile<model<input<9>, relu>, batch<1>, precision<double>, mse>(), [](double v) { return v > 0 ? v : 0; });
  check(compile<model<input<9>, kiln::tanh>, batch<1>, precision<double>, mse>(),
        [](double v) { return std::tanh(v); });
  check(compile<model<input<9>, sigmoid>, batch<1>, precision<double>, mse>(),
        [](double v) { return 1 / (1 + std::exp(-v)); });
}

TEST(flatten, is_free_and_exact) {
  auto p = compile<model<input<2, 3>, flatten, relu>, batch<2>, precision<double>, mse>();
  auto x = p.input();
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i) - 5;
  p.forward();
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(p.output()[i], std::max(0.0, x[i]));
}
}  // namespace
