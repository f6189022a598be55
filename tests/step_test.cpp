// kiln::train_step (kiln/step.hpp): the one place that reduces, clips,
// decides about a non-finite loss and updates. A step equals forward,
// backward and the optimizer by hand; a NaN step changes nothing, not even
// batch_norm's running statistics, with one replica or several.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace {
using namespace kiln;
using bn_net = model<input<6>, dense<8>, batch_norm, relu, dense<3>>;

template <class P>
void fill_step(P& p, std::vector<std::uint32_t>& t, rng& g) {
  for (auto& x : p.input()) x = static_cast<float>(g.uniform(-1, 1));
  for (auto& v : t) v = static_cast<std::uint32_t>(g.below(3));
}

template <class P>
void a_non_finite_step_changes_nothing() {
  P a(5);
  P b = a;  // never sees the NaN step
  const sgd o{.lr = 0.1f, .momentum = 0.9f};
  sgd::state<float> sa(a.parameters().size()), sb(b.parameters().size());
  rng g(11);
  std::vector<std::uint32_t> t(P::global_batch);
  fill_step(a, t, g);
  std::copy(a.input().begin(), a.input().end(), b.input().begin());
  train_step(a, t, o, sa);
  train_step(b, t, o, sb);

  const std::vector<float> params(a.parameters().begin(), a.parameters().end());
  const std::vector<float> state(a.state().begin(), a.state().end());
  ASSERT_FALSE(state.empty());
  a.input()[1] = std::nanf("");
  EXPECT_TRUE(std::isnan(train_step(a, t, o, sa).loss));
  EXPECT_EQ(params, std::vector<float>(a.parameters().begin(), a.parameters().end()));
  EXPECT_EQ(state, std::vector<float>(a.state().begin(), a.state().end()))
      << "batch_norm's running statistics changed in a step that was skipped";

  // The next good step continues as if the NaN step had not been tried: the
  // optimizer's momentum was not touched either.
  fill_step(a, t, g);
  std::copy(a.input().begin(), a.input().end(), b.input().begin());
  EXPECT_EQ(a.step(), b.step()) << "a skipped step was counted";
  EXPECT_EQ(train_step(a, t, o, sa).loss, train_step(b, t, o, sb).loss);
  EXPECT_EQ(std::vector<float>(a.parameters().begin(), a.parameters().end()),
            std::vector<float>(b.parameters().begin(), b.parameters().end()));
  EXPECT_EQ(std::vector<float>(a.state().begin(), a.state().end()),
            std::vector<float>(b.state().begin(), b.state().end()));
}

TEST(step, a_non_finite_loss_changes_nothing) {
  a_non_finite_step_changes_nothing<decltype(compile<bn_net, batch<8>>())>();
}
TEST(step, a_non_finite_loss_changes_nothing_with_replicas) {
  a_non_finite_step_changes_nothing<decltype(compile<bn_net, batch<4>, replicate<2>>())>();
}
TEST(step, a_non_finite_loss_changes_nothing_with_clipping) {
  using P = decltype(compile<bn_net, batch<8>>());
  P a(2);
  const std::vector<float> params(a.parameters().begin(), a.parameters().end());
  const std::vector<float> state(a.state().begin(), a.state().end());
  adam o{.lr = 1e-3f};
  adam::state<float> s(a.parameters().size());
  std::vector<std::uint32_t> t(8, 1);
  for (auto& x : a.input()) x = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(std::isfinite(train_step(a, t, o, s, {.max_grad_norm = 1.0}).loss));
  EXPECT_EQ(params, std::vector<float>(a.parameters().begin(), a.parameters().end()));
  EXPECT_EQ(state, std::vector<float>(a.state().begin(), a.state().end()));
}

// With clipping the step reduces first, then scales the whole gradient:
// the same as forward, backward, scale and update by hand.
template <class P>
void clipped_step_equals_the_steps_by_hand(double max_norm) {
  P a(7);
  P b = a;
  const sgd o{.lr = 0.5f, .momentum = 0.5f};
  sgd::state<float> sa(a.parameters().size()), sb(b.parameters().size());
  rng g(2);
  std::vector<std::uint32_t> t(P::global_batch);
  bool clipped = false;
  for (int step = 0; step < 3; ++step) {
    fill_step(a, t, g);
    std::copy(a.input().begin(), a.input().end(), b.input().begin());
    const loss_value la = train_step(a, t, o, sa, {.max_grad_norm = max_norm});
    b.set_step(a.step() - 1);
    b.forward();
    const loss_value lb = b.backward(t);
    const double norm = b.gradient_norm();
    if (norm > max_norm) {
      clipped = true;
      const float scale = static_cast<float>(max_norm / (norm + 1e-6));
      for (float& v : b.gradients()) v *= scale;
    }
    sb.step(o, b.parameters(), b.gradients());
    EXPECT_EQ(la.loss, lb.loss);
    ASSERT_EQ(std::vector<float>(a.parameters().begin(), a.parameters().end()),
              std::vector<float>(b.parameters().begin(), b.parameters().end()))
        << "step " << step;
  }
  EXPECT_TRUE(clipped) << "max_norm too large for the test to clip";
}
// One replica, no clipping: each layer's parameters are updated right after
// the backward of the first layer that uses them. That must give the bits of
// forward, backward, then the optimizer over the whole buffer by hand, for
// every optimizer, with ties, batch_norm, sub-models, bf16 and f64.
template <class P, class O>
void layer_by_layer_step_equals_the_steps_by_hand(const O& o, std::size_t input_range, std::size_t classes) {
  using T = typename P::scalar_type;
  P a(3);
  P b = a;
  typename O::template state<T> sa(a.parameters().size()), sb(b.parameters().size());
  rng g(9);
  std::vector<typename P::target_type> t(P::global_batch * P::targets_per_sample);
  for (int step = 0; step < 4; ++step) {
    for (auto& x : a.input())
      x = input_range ? static_cast<T>(g.below(input_range)) : static_cast<T>(g.uniform(-1, 1));
    for (auto& v : t) v = static_cast<typename P::target_type>(g.below(classes));
    std::copy(a.input().begin(), a.input().end(), b.input().begin());
    const loss_value la = train_step(a, t, o, sa);
    b.set_step(a.step() - 1);
    b.forward();
    const loss_value lb = b.backward(t);
    sb.step(o, b.parameters(), b.gradients(), a.step());
    b.set_step(a.step());
    EXPECT_EQ(la.loss, lb.loss);
    ASSERT_EQ(std::vector<T>(a.gradients().begin(), a.gradients().end()),
              std::vector<T>(b.gradients().begin(), b.gradients().end()))
        << "step " << step << ": gradients() after the step are not the step's gradient";
    ASSERT_EQ(std::vector<T>(a.parameters().begin(), a.parameters().end()),
              std::vector<T>(b.parameters().begin(), b.parameters().end()))
        << "step " << step;
    ASSERT_EQ(std::vector<T>(sa.buffer().begin(), sa.buffer().end()),
              std::vector<T>(sb.buffer().begin(), sb.buffer().end()))
        << "step " << step << ": the optimizer's state";
    ASSERT_EQ(std::vector<T>(a.state().begin(), a.state().end()), std::vector<T>(b.state().begin(), b.state().end()));
  }
}

struct tied_in;
struct tokens_in;
using tied_bn_net = model<input<6>, dense<8, tied<tied_in>>, batch_norm, relu, dense<8>, kiln::tanh,
                          dense<6, tied_transposed<tied_in>>, relu, dense<3>>;
struct block_of_layers : model<input<8>, dense<8>, gelu, dense<8>> {};
using nested_net = model<input<6>, dense<8>, residual<dense<8>, relu>, block_of_layers, layer_norm, dense<3>>;
using small_lm = model<input_tokens<5>, embedding<11, 8, tied<tokens_in>>, position_embedding, transformer_block<2, 16>,
                       layer_norm, unembed<tied<tokens_in>>>;

TEST(step, layer_by_layer_update_equals_the_whole_update_by_hand) {
  const sgd momentum{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
  const sgd nesterov{.lr = 0.1f, .momentum = 0.5f, .nesterov = true};
  const adam plain_adam{.lr = 1e-2f, .weight_decay = 0.01f};
  const adamw decoupled{.lr = 1e-2f};
  layer_by_layer_step_equals_the_steps_by_hand<decltype(compile<bn_net, batch<8>>())>(momentum, 0, 3);
  layer_by_layer_step_equals_the_steps_by_hand<decltype(compile<tied_bn_net, batch<8>>())>(nesterov, 0, 3);
  layer_by_layer_step_equals_the_steps_by_hand<decltype(compile<tied_bn_net, batch<8>>())>(plain_adam, 0, 3);
  layer_by_layer_step_equals_the_steps_by_hand<decltype(compile<nested_net, batch<4>>())>(decoupled, 0, 3);
  layer_by_layer_step_equals_the_steps_by_hand<decltype(compile<small_lm, batch<3>>())>(decoupled, 11, 11);
  layer_by_layer_step_equals_the_steps_by_hand<decltype(compile<small_lm, batch<3>, precision<bf16>>())>(momentum, 11,
                                                                                                          11);
  layer_by_layer_step_equals_the_steps_by_hand<decltype(compile<tied_bn_net, batch<8>, precision<double>>())>(
      plain_adam, 0, 3);
  layer_by_layer_step_equals_the_steps_by_hand<decltype(compile<tied_bn_net, batch<8>, replicate<1>>())>(momentum, 0,
                                                                                                          3);
}

// Which part of the flat buffer each layer's backward completes: a tied
// weight only with its first use, which runs backward last; the parts cover
// the buffer once, in order.
TEST(step, each_parameter_is_released_by_its_first_use) {
  using engine = detail::replica_engine<tied_bn_net, 8, float, false>;
  using layout = tied_bn_net::parameters;
  constexpr auto& part = engine::released_by::part;
  static_assert(part.size() == tied_bn_net::layer_count);
  // dense<8, tied>, batch_norm, relu, dense<8>, tanh, dense<6, tied_transposed>, relu, dense<3>
  EXPECT_EQ(part[0].first, 0u);
  EXPECT_LT(layout::offset<tied_in>, part[0].second) << "the tied weight goes with its first use";
  EXPECT_GT(part[5].first, layout::offset<tied_in>);
  EXPECT_EQ(part[5].second - part[5].first, detail::round_up(6, detail::parameter_alignment))
      << "the tied weight's second use releases its own bias alone";
  for (std::size_t k : {2u, 4u, 6u}) EXPECT_EQ(part[k].first, part[k].second) << "an activation has no parameters";
  for (std::size_t k = 1; k < part.size(); ++k) EXPECT_EQ(part[k].first, part[k - 1].second) << k;
  EXPECT_EQ(part.back().second, layout::buffer_size);
}

TEST(step, clipped_step_equals_the_steps_by_hand) {
  clipped_step_equals_the_steps_by_hand<decltype(compile<bn_net, batch<8>>())>(0.05);
}
TEST(step, clipped_step_equals_the_steps_by_hand_with_replicas) {
  clipped_step_equals_the_steps_by_hand<decltype(compile<bn_net, batch<4>, replicate<2>>())>(0.05);
}
}  // namespace
