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
TEST(step, clipped_step_equals_the_steps_by_hand) {
  clipped_step_equals_the_steps_by_hand<decltype(compile<bn_net, batch<8>>())>(0.05);
}
TEST(step, clipped_step_equals_the_steps_by_hand_with_replicas) {
  clipped_step_equals_the_steps_by_hand<decltype(compile<bn_net, batch<4>, replicate<2>>())>(0.05);
}
}  // namespace
