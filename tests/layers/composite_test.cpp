// The layers that carry state or contain layers: dropout, batch_norm,
// residual, models used as layers, position_wise, causal self-attention,
// position_embedding and transformer_block. Backward against central finite
// differences in double, and the behaviour each one promises.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "../support/blobs.hpp"
#include "../support/gradient_check.hpp"

namespace {
using namespace kiln;
using kiln::testing::case_;

struct block : model<input<6>, dense<6>, gelu> {};
struct tok;

using cases = ::testing::Types<
    case_<model<input<5>, dense<6>, dropout<3, 10>, dense<3>>, softmax_cross_entropy<>>,
    case_<model<input<5>, dense<6>, batch_norm, relu, dense<3>>, softmax_cross_entropy<>>,
    case_<model<input<2, 5, 5>, conv2d<3, 3>, batch_norm, kiln::tanh, flatten, dense<3>>, mse>,
    case_<model<input<5>, dense<6>, residual<dense<6>, kiln::tanh, dense<6>>, dense<3>>, softmax_cross_entropy<>>,
    case_<model<input<5>, dense<6>, block, block, dense<3>>, softmax_cross_entropy<>>,
    case_<model<input<4, 5>, position_wise<dense<6>>, gelu, position_wise<dense<3>>>, softmax_cross_entropy<>>,
    case_<model<input<4, 6>, causal_self_attention<2>, position_wise<dense<3>>>, softmax_cross_entropy<>>,
    case_<model<input<4, 6>, residual<layer_norm, residual<position_wise<dense<6>>>, dropout<1, 5>>, softmax>, mse>,
    case_<model<input_tokens<4>, embedding<7, 8, tied<tok>>, position_embedding, transformer_block<2, 12>, layer_norm,
                unembed<tied<tok>>>,
          softmax_cross_entropy<>>>;

struct case_names {
  template <class T>
  static std::string GetName(int i) {
    constexpr const char* names[] = {
        "dropout",       "batch_norm_features",   "batch_norm_images",       "residual",      "named_sub_model",
        "position_wise", "causal_self_attention", "nested_residual_dropout", "transformer_lm"};
    return names[i];
  }
};

template <class C>
class composite_gradient : public ::testing::Test {};
TYPED_TEST_SUITE(composite_gradient, cases, case_names);

TYPED_TEST(composite_gradient, matches_finite_differences_in_train_mode) {
  kiln::testing::expect_case_gradients_match<TypeParam, 3>(21, 2e-6);
}

TYPED_TEST(composite_gradient, matches_finite_differences_in_eval_mode) {
  auto p = compile<typename TypeParam::model, batch<3>, precision<double>, typename TypeParam::loss>(22);
  rng g(3, 5);
  for (auto& w : p.parameters()) w += 0.1 * g.uniform(-1, 1);
  for (auto& s : p.state()) s += 0.2 * g.uniform(0, 1);  // running statistics away from (0, 1)
  p.set_training(false);
  const auto targets = kiln::testing::random_batch(p, 23);
  kiln::testing::expect_gradients_match_finite_differences(p, targets, 3, 1e-6, 2e-6);
}

// ---- backward writes every gradient ----------------------------------------
// Layers that own their parameters (untied dense, conv2d) write their
// gradients instead of adding them to zeros, and the program zeroes only the
// rest: whatever the gradient buffer held before a backward pass must not
// show in its result. Tied weights, a residual branch (nested layers add),
// no_bias, double (Eigen's kernel) and replicas are all here.
struct shared_w {};
template <class M, class... Options>
using program_of = decltype(compile<M, Options...>(0));
using written_cases = ::testing::Types<
    program_of<model<input<7>, dense<9>, relu, dense<4>>, batch<5>, precision<float>, mse>,
    program_of<model<input<2, 9, 9>, conv2d<3, 3, 1, same>, relu, max_pool<2>, conv2d<4, 3>, flatten, dense<3>>,
               batch<4>, precision<float>, softmax_cross_entropy<>>,
    program_of<model<input<6>, dense<6, tied<shared_w>>, residual<dense<6>, kiln::tanh>, dense<6, tied<shared_w>>,
                     dense<3, no_bias>>,
               batch<3>, precision<double>, mse>,
    program_of<model<input<7>, dense<9>, relu, dense<4>>, batch<4>, replicate<2>, precision<float>, mse>>;
template <class P>
class backward_writes : public ::testing::Test {};
TYPED_TEST_SUITE(backward_writes, written_cases);

TYPED_TEST(backward_writes, every_gradient_whatever_the_buffer_held) {
  using P = TypeParam;
  P p(3);
  auto targets = kiln::testing::random_batch(p, 4);
  targets.resize(P::global_batch * P::targets_per_sample, targets.front());
  p.forward();
  p.backward(targets);
  const std::vector<typename P::scalar_type> first(p.gradients().begin(), p.gradients().end());
  std::size_t nonzero = 0;
  for (auto g : first) nonzero += g != 0;
  EXPECT_GT(nonzero, first.size() / 2);
  for (auto& g : p.gradients()) g = std::numeric_limits<typename P::scalar_type>::quiet_NaN();
  p.forward();
  p.backward(targets);
  for (std::size_t i = 0; i < first.size(); ++i) ASSERT_EQ(p.gradients()[i], first[i]) << "gradient " << i;
}

// ---- dropout -----------------------------------------------------------------

using drop_net = model<input<1000>, dropout<1, 4>>;

TEST(dropout, drops_the_rate_and_scales_the_rest_in_train_mode) {
  auto p = compile<drop_net, batch<4>, precision<double>, mse>(5);
  for (auto& x : p.input()) x = 1.0;
  p.forward();
  std::size_t dropped = 0;
  for (double y : p.output()) {
    if (y == 0.0) {
      ++dropped;
    } else {
      EXPECT_DOUBLE_EQ(y, 1.0 / 0.75);
    }
  }
  // 4000 draws at 0.25: the standard deviation of the count is about 27.
  EXPECT_NEAR(static_cast<double>(dropped), 1000.0, 4 * 27.4);
}

TEST(dropout, passes_through_in_eval_mode) {
  auto p = compile<drop_net, batch<2>, precision<double>, mse>(5);
  rng g(1);
  for (auto& x : p.input()) x = g.uniform(-1, 1);
  p.set_training(false);
  p.forward();
  EXPECT_TRUE(std::equal(p.input().begin(), p.input().end(), p.output().begin()));
}

TEST(dropout, the_mask_follows_seed_and_step_and_not_the_split_into_replicas) {
  auto masks = [](auto& p, std::uint64_t step) {
    for (auto& x : p.input()) x = 1.0f;
    p.set_step(step);
    p.forward();
    return std::vector<float>(p.output().begin(), p.output().end());
  };
  auto one = compile<drop_net, batch<8>, mse>(5);
  auto two = compile<drop_net, batch<4>, replicate<2>, mse>(5);
  auto other_seed = compile<drop_net, batch<8>, mse>(6);
  EXPECT_EQ(masks(one, 3), masks(two, 3));
  EXPECT_EQ(masks(one, 3), masks(one, 3));
  EXPECT_NE(masks(one, 3), masks(one, 4));
  EXPECT_NE(masks(one, 3), masks(other_seed, 3));
}

TEST(dropout, copies_and_assignments_carry_the_mode_seed_and_step) {
  auto p = compile<drop_net, batch<2>, mse>(5);
  p.set_step(9);
  p.set_training(false);
  auto copy = p;
  auto assigned = compile<drop_net, batch<2>, mse>(6);
  assigned = p;
  for (const auto* q : {&copy, &assigned}) {
    EXPECT_EQ(q->step(), 9u);
    EXPECT_EQ(q->seed(), 5u);
    EXPECT_FALSE(q->training());
  }
}

TEST(dropout, train_step_advances_the_step_and_restores_the_mode) {
  auto p = compile<model<input<4>, dense<3>, dropout<1, 2>>, batch<2>, mse>(1);
  p.set_training(false);
  const std::vector<float> t(6, 0.5f);
  sgd opt{.lr = 0.1f};
  sgd::state<float> st(p.parameters().size());
  kiln::train_step(p, std::span<const float>(t), opt, st);
  EXPECT_EQ(p.step(), 1u);
  EXPECT_FALSE(p.training());
}

// ---- batch_norm ----------------------------------------------------------------

using bn_net = model<input<3, 2, 2>, batch_norm>;

TEST(batch_norm, normalises_each_channel_over_the_batch_and_tracks_running_statistics) {
  auto p = compile<bn_net, batch<4>, precision<double>, mse>(1);
  rng g(2);
  for (auto& x : p.input()) x = 3.0 + 2.0 * g.normal();
  p.forward();
  const auto x = p.input();
  const auto y = p.output();
  for (std::size_t c = 0; c < 3; ++c) {
    double mean = 0, var = 0, xmean = 0, xsq = 0;
    for (std::size_t s = 0; s < 4; ++s)
      for (std::size_t i = 0; i < 4; ++i) {
        mean += y[s * 12 + c * 4 + i] / 16;
        xmean += x[s * 12 + c * 4 + i] / 16;
      }
    for (std::size_t s = 0; s < 4; ++s)
      for (std::size_t i = 0; i < 4; ++i) {
        var += (y[s * 12 + c * 4 + i] - mean) * (y[s * 12 + c * 4 + i] - mean) / 16;
        xsq += (x[s * 12 + c * 4 + i] - xmean) * (x[s * 12 + c * 4 + i] - xmean);
      }
    EXPECT_NEAR(mean, 0.0, 1e-12);
    EXPECT_NEAR(var, xsq / 16 / (xsq / 16 + 1e-5), 1e-9);
    // running: 0.9·(0, 1) + 0.1·(batch mean, unbiased batch variance)
    EXPECT_NEAR(p.state()[c], 0.1 * xmean, 1e-12) << c;
    EXPECT_NEAR(p.state()[16 + c], 0.9 + 0.1 * xsq / 15, 1e-12) << c;
  }
}

TEST(batch_norm, eval_mode_uses_the_running_statistics) {
  auto p = compile<model<input<2>, batch_norm>, batch<2>, precision<double>, mse>(1);
  auto s = p.state();  // running mean (2 values, padded to 16), then running variance
  s[0] = 1.0, s[1] = -2.0, s[16] = 4.0, s[17] = 0.25;
  p.set_training(false);
  p.input()[0] = 3.0, p.input()[1] = 0.0;
  p.forward();
  EXPECT_NEAR(p.output()[0], (3.0 - 1.0) / std::sqrt(4.0 + 1e-5), 1e-12);
  EXPECT_NEAR(p.output()[1], (0.0 + 2.0) / std::sqrt(0.25 + 1e-5), 1e-12);
  EXPECT_EQ(s[0], 1.0);  // eval mode leaves them alone
}

TEST(batch_norm, running_statistics_are_in_checkpoints_and_copies) {
  auto p = compile<bn_net, batch<4>, mse>(1);
  rng g(2);
  for (auto& x : p.input()) x = static_cast<float>(g.normal());
  p.forward();
  const std::vector<float> state(p.state().begin(), p.state().end());
  const auto dir = std::filesystem::temp_directory_path() / "kiln_bn_checkpoint";
  std::filesystem::create_directories(dir);
  save_checkpoint(dir / "bn.kiln", p);
  auto q = compile<bn_net, batch<2>, mse>(9);
  load_checkpoint(dir / "bn.kiln", q);
  EXPECT_EQ(state, std::vector<float>(q.state().begin(), q.state().end()));
  auto r = p;
  EXPECT_EQ(state, std::vector<float>(r.state().begin(), r.state().end()));
  std::filesystem::remove_all(dir);
  EXPECT_NE(bn_net::signature().find("state"), std::string::npos);
}

TEST(batch_norm, the_trainer_evaluates_in_eval_mode) {
  // After training, evaluation must not depend on how the evaluation set is batched.
  using net = model<input<4>, dense<8>, batch_norm, relu, dense<3>>;
  auto data = kiln::testing::blobs(64, 4, {4});
  auto p = compile<net, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  t.fit(data, epochs{2}, {.progress = progress_mode::none});
  const auto all = t.evaluate(data);
  auto q = compile<net, batch<32>>(1);
  q.assign_parameters(p);
  trainer u{q, sgd{.lr = 0.05f}};
  EXPECT_NEAR(u.evaluate(data).loss, all.loss, 1e-5);
}

// ---- residual, models as layers, positions -------------------------------------

using res_net = model<input<5>, dense<6>, residual<dense<6>, relu>, dense<3>>;
static_assert(res_net::parameter_count == 36 + 42 + 21);

TEST(residual, adds_the_branch_to_its_input) {
  auto p = compile<model<input<3>, residual<dense<3, no_bias>>>, batch<1>, precision<double>, mse>(1);
  auto w = p.layer_parameter<2>();  // the dense inside the residual (position 1)
  std::fill(w.begin(), w.end(), 0.0);
  w[0] = 2.0, w[4] = 3.0, w[8] = -1.0;  // diagonal
  p.input()[0] = 1, p.input()[1] = 2, p.input()[2] = 3;
  p.forward();
  EXPECT_EQ(p.output()[0], 1 + 2.0);
  EXPECT_EQ(p.output()[1], 2 + 6.0);
  EXPECT_EQ(p.output()[2], 3 - 3.0);
}

TEST(residual, layers_inside_take_the_positions_after_their_container) {
  auto p = compile<res_net, batch<2>>(1);
  EXPECT_EQ(p.layer_parameter<3>().size(), 36u);  // dense<6> inside the residual at 2
  EXPECT_EQ(p.layer_parameter<5>().size(), 18u);  // the last dense: positions 3, 4 are inside
  const std::string s = res_net::summary();
  EXPECT_NE(s.find("  2  residual<dense<6>, relu>"), std::string::npos) << s;
  EXPECT_NE(s.find("  3    dense<6>"), std::string::npos) << s;
  EXPECT_NE(s.find("  5  dense<3>"), std::string::npos) << s;
}

TEST(named_sub_model, two_uses_are_two_sets_of_weights_and_the_name_shows) {
  using net = model<input<6>, block, block>;
  static_assert(net::parameter_count == 2 * 42);
  auto p = compile<net, batch<1>>(1);
  EXPECT_NE(p.layer_parameter<2>().data(), p.layer_parameter<5>().data());
  EXPECT_NE(net::summary().find("block"), std::string::npos);
}

// A model used as a layer is "model" in the signature: its name() is its
// type's, which g++ and clang spell differently (block is in an anonymous
// namespace); its layers follow it. State values are listed like parameters.
TEST(named_sub_model, the_signature_names_it_model_on_every_compiler) {
  using net = model<input<2, 6>, position_wise<dense<6>>, flatten, dense<6>, residual<block, relu>, batch_norm>;
  EXPECT_EQ(net::signature(),
            "input shape<2, 6>\n"
            "layer 1 position_wise<dense<6>> shape<2, 6> -> shape<2, 6>\n"
            "layer 2 flatten shape<2, 6> -> shape<12>\n"
            "layer 3 dense<6> shape<12> -> shape<6>\n"
            "layer 4 residual<model, relu> shape<6> -> shape<6>\n"
            "layer 5 model shape<6> -> shape<6>\n"
            "layer 6 dense<6> shape<6> -> shape<6>\n"
            "layer 7 gelu shape<6> -> shape<6>\n"
            "layer 8 relu shape<6> -> shape<6>\n"
            "layer 9 batch_norm shape<6> -> shape<6>\n"
            "param 0 shape<6, 6> at 0 used by 1\n"
            "param 1 shape<6> at 48 used by 1\n"
            "param 2 shape<6, 12> at 64 used by 3\n"
            "param 3 shape<6> at 144 used by 3\n"
            "param 4 shape<6, 6> at 160 used by 6\n"
            "param 5 shape<6> at 208 used by 6\n"
            "param 6 shape<6> at 224 used by 9\n"
            "param 7 shape<6> at 240 used by 9\n"
            "state 0 shape<6> at 0 used by 9\n"
            "state 1 shape<6> at 16 used by 9\n");
}

// Inside a position_wise too: its layers follow it, at the positions after
// its own, and the values are used by them (two models that differ only in
// there must not share a signature).
TEST(named_sub_model, inside_position_wise_its_layers_are_in_the_signature) {
  using net = model<input<2, 6>, position_wise<block>, flatten, dense<3>>;
  EXPECT_EQ(net::signature(),
            "input shape<2, 6>\n"
            "layer 1 position_wise<model> shape<2, 6> -> shape<2, 6>\n"
            "layer 2 dense<6> shape<6> -> shape<6>\n"
            "layer 3 gelu shape<6> -> shape<6>\n"
            "layer 4 flatten shape<2, 6> -> shape<12>\n"
            "layer 5 dense<3> shape<12> -> shape<3>\n"
            "param 0 shape<6, 6> at 0 used by 2\n"
            "param 1 shape<6> at 48 used by 2\n"
            "param 2 shape<3, 12> at 64 used by 5\n"
            "param 3 shape<3> at 112 used by 5\n");
  EXPECT_NE(net::summary().find("  2    dense<6>"), std::string::npos) << net::summary();
  auto p = compile<net, batch<1>>(1);
  EXPECT_EQ(p.layer_parameter<2>().size(), 36u);  // the dense inside
}

// ---- attention ------------------------------------------------------------------

TEST(causal_self_attention, no_position_sees_a_later_one) {
  using net = model<input<5, 8>, causal_self_attention<2>>;
  auto p = compile<net, batch<1>, precision<double>, mse>(3);
  rng g(4);
  for (auto& w : p.parameters()) w += 0.1 * g.uniform(-1, 1);
  for (auto& x : p.input()) x = g.uniform(-1, 1);
  p.forward();
  const std::vector<double> before(p.output().begin(), p.output().end());
  for (std::size_t i = 3 * 8; i < 4 * 8; ++i) p.input()[i] += 1.0;  // change position 3
  p.forward();
  for (std::size_t i = 0; i < before.size(); ++i) {
    if (i < 3 * 8) {
      EXPECT_EQ(p.output()[i], before[i]) << "position " << i / 8 << " saw a later one";
    } else {
      EXPECT_NE(p.output()[i], before[i]) << "position " << i / 8;
    }
  }
}

using lm = model<input_tokens<16>, embedding<32, 16, tied<tok>>, position_embedding, transformer_block<4>,
                 transformer_block<4>, layer_norm, unembed<tied<tok>>>;
// per block: 2 layer norms (4·16) + attention (4·16² + 4·16) + 16→64→16 (2·16·64 + 64 + 16)
static_assert(lm::parameter_count == 32 * 16 + 16 * 16 + 2 * (64 + 1088 + 2128) + 32);

TEST(transformer_block, a_small_language_model_learns_a_repeating_sequence) {
  auto p = compile<lm, batch<8>>(7);
  adamw opt{.lr = 3e-3f};
  adamw::state<float> st(p.parameters().size());
  std::vector<std::uint32_t> targets(8 * 16);
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    for (std::size_t s = 0; s < 8; ++s)
      for (std::size_t i = 0; i <= 16; ++i) {
        const auto token = static_cast<std::uint32_t>((s + i) * 5 % 32);  // next token: +5 mod 32
        if (i < 16) p.input()[s * 16 + i] = static_cast<float>(token);
        if (i > 0) targets[s * 16 + i - 1] = token;
      }
    const double loss = kiln::train_step(p, std::span<const std::uint32_t>(targets), opt, st).loss;
    if (step == 0) first = loss;
    last = loss;
  }
  EXPECT_NEAR(first, std::log(32.0), 0.5);
  EXPECT_LT(last, 0.1) << "the block did not learn to attend to the previous token";
}

}  // namespace
