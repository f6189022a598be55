// A layer written with kiln's public names only (examples/custom_layer.hpp):
// it satisfies the protocol, its backward matches finite differences in
// double, alone, twice in one model and inside kiln's own containers, and a
// model using it trains.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <vector>

#include "../../examples/custom_layer.hpp"
#include "../support/gradient_check.hpp"

namespace {
using namespace kiln;
using kiln::testing::case_;

using bound = scaled_tanh::bind<shape<3, 4>, 1>;
static_assert(Layer<scaled_tanh>);
static_assert(BoundLayer<bound>);
static_assert(layer_traits<bound>::checked);
static_assert(layer_traits<bound>::has<member::saved> && !layer_traits<bound>::has<member::workspace>);
static_assert(model<input<3, 4>, scaled_tanh>::parameter_count == 2 * 12);
static_assert(model<input<5>, scaled_tanh>::memory_plan<8>::saved_elements >= 5 * 8);

using cases = ::testing::Types<case_<model<input<5>, dense<6>, scaled_tanh, dense<3>>, softmax_cross_entropy<>>,
                               case_<model<input<5>, scaled_tanh, dense<4>, scaled_tanh>, mse>,
                               case_<model<input<2, 4>, residual<scaled_tanh, position_wise<dense<4>>>>, mse>,
                               case_<model<input<5>, project<4>, scaled_tanh, project<3>>, softmax_cross_entropy<>>,
                               case_<model<input<3, 4>, position_wise<project<4>>, flatten, project<2>>, mse>>;
template <class C>
class custom_layer : public ::testing::Test {};
TYPED_TEST_SUITE(custom_layer, cases);

TYPED_TEST(custom_layer, backward_matches_finite_differences) {
  kiln::testing::expect_case_gradients_match<TypeParam, 3>(21);
}

TEST(custom_layer, forward_is_tanh_of_g_x_plus_b) {
  auto p = compile<model<input<3>, scaled_tanh>, batch<2>, precision<double>, mse>(1);
  auto g = p.layer_parameter<1, 0>();
  auto b = p.layer_parameter<1, 1>();
  const double gv[3] = {0.5, -2, 1}, bv[3] = {0.1, 0, -0.3};
  std::copy(gv, gv + 3, g.begin());
  std::copy(bv, bv + 3, b.begin());
  const double x[6] = {1, 2, 3, -1, 0.5, 0};
  std::copy(x, x + 6, p.input().begin());
  p.forward();
  for (int k = 0; k < 6; ++k) EXPECT_DOUBLE_EQ(p.output()[k], std::tanh(gv[k % 3] * x[k] + bv[k % 3])) << k;
}

static_assert(layer_traits<project<4>::bind<shape<5>, 1>>::has<member::reserve>);

/// Two classes told apart by the sign of the first of 4 features.
dataset signs() {
  dataset d{"signs", {4}, {}, {}, {}, 0};
  rng g(9);
  for (int i = 0; i < 256; ++i) {
    float f[4];
    for (float& v : f) v = static_cast<float>(g.uniform(-1, 1));
    d.features.insert(d.features.end(), f, f + 4);
    d.labels.push_back(f[0] > 0 ? 1u : 0u);
  }
  return d;
}

// project<U> runs the same product as kiln's dense<U, no_bias>: same weights,
// same outputs and gradients, bit for bit (one GEMM each way).
TEST(custom_layer, project_computes_what_dense_without_bias_does) {
  auto mine = compile<model<input<6>, project<5>, relu, dense<3>>, batch<8>>(2);
  auto theirs = compile<model<input<6>, dense<5, no_bias>, relu, dense<3>>, batch<8>>(2);
  std::copy(mine.parameters().begin(), mine.parameters().end(), theirs.parameters().begin());
  rng g(5);
  for (auto& x : mine.input()) x = static_cast<float>(g.uniform(-1, 1));
  std::copy(mine.input().begin(), mine.input().end(), theirs.input().begin());
  std::vector<std::uint32_t> t(8);
  for (auto& v : t) v = static_cast<std::uint32_t>(g.below(3));
  mine.forward();
  theirs.forward();
  EXPECT_EQ(mine.backward(t).loss, theirs.backward(t).loss);
  EXPECT_EQ(std::vector<float>(mine.output().begin(), mine.output().end()),
            std::vector<float>(theirs.output().begin(), theirs.output().end()));
  EXPECT_EQ(std::vector<float>(mine.gradients().begin(), mine.gradients().end()),
            std::vector<float>(theirs.gradients().begin(), theirs.gradients().end()));
}

TEST(custom_layer, project_trains_under_bf16_and_with_replicas) {
  using net = model<input<4>, project<8>, relu, dense<2>>;
  for (int run = 0; run < 2; ++run) {
    const dataset d = signs();
    auto check = [&](auto& p) {
      trainer t{p, sgd{.lr = 0.1f, .momentum = 0.9f}};
      t.fit(d, epochs{20}, {.progress = progress_mode::none});
      EXPECT_GT(t.evaluate(d).accuracy, 0.9);
    };
    if (run == 0) {
      auto p = compile<net, batch<16>, precision<bf16>>(4);
      check(p);
    } else {
      auto p = compile<net, batch<8>, replicate<2>>(4);
      check(p);
    }
  }
}

TEST(custom_layer, a_model_with_it_learns) {
  using net = model<input<4>, dense<8>, scaled_tanh, dense<2>>;
  auto p = compile<net, batch<16>>(4);
  const dataset d = signs();
  trainer t{p, sgd{.lr = 0.1f, .momentum = 0.9f}};
  const double before = t.evaluate(d).loss;
  t.fit(d, epochs{20}, {.progress = progress_mode::none});
  const evaluation after = t.evaluate(d);
  EXPECT_LT(after.loss, before / 4);
  EXPECT_GT(after.accuracy, 0.95);
}
}  // namespace
