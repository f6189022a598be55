// kiln::parameter_store (kiln/parameter_store.hpp): programs of any batch,
// precision or replication over ONE store share its parameters, state, seed
// and step count without copying them; a store outlives the program that
// made it; copies have stores of their own; the store's step count is the
// one step count (dropout's masks, Adam's t, the trainer's steps).
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <vector>

namespace {
using namespace kiln;
using net = model<input<6>, dense<8>, relu, dense<3>>;
/// batch_norm keeps state (and needs two samples per batch to train).
using bn_net = model<input<6>, dense<8>, batch_norm, relu, dense<3>>;

template <class P>
void fill(P& p, std::vector<std::uint32_t>& t, rng& g) {
  for (auto& x : p.input()) x = static_cast<typename P::scalar_type>(g.uniform(-1, 1));
  for (auto& v : t) v = static_cast<std::uint32_t>(g.below(3));
}
template <class Span>
auto values(const Span& s) {
  return std::vector<std::remove_cv_t<typename Span::element_type>>(s.begin(), s.end());
}

TEST(parameter_store, programs_over_one_store_share_its_memory) {
  auto train = compile<bn_net, batch<16>>(3);
  auto one = compile<bn_net, batch<2>>(train.store());
  auto wide = compile<bn_net, batch<4>, precision<bf16>, replicate<2>>(train.store());
  EXPECT_EQ(one.store(), train.store());
  EXPECT_EQ(one.parameters().data(), train.parameters().data());
  EXPECT_EQ(wide.parameters().data(), train.parameters().data());
  EXPECT_EQ(one.state().data(), train.state().data());
  EXPECT_EQ(train.store().use_count(), 3);
}

// After each training step the small program reads the weights and the
// running statistics the step wrote: its output for a sample equals the
// training program's output for the same sample, in eval mode.
template <class M, std::size_t B>
void check_small_program_follows() {
  auto train = compile<M, batch<16>, precision<double>>(5);
  auto one = compile<M, batch<B>, precision<double>>(train.store());
  one.set_training(false);
  const sgd o{.lr = 0.2f, .momentum = 0.9f};
  sgd::state<double> s(train.parameters().size());
  rng g(7);
  std::vector<std::uint32_t> t(16);
  for (int step = 0; step < 3; ++step) {
    fill(train, t, g);
    train_step(train, t, o, s);
    EXPECT_EQ(one.step(), static_cast<std::uint64_t>(step + 1));

    train.set_training(false);
    train.forward();
    train.set_training(true);
    for (std::size_t first : {std::size_t{0}, std::size_t{8}, std::size_t{16 - B}}) {
      std::copy_n(train.input().begin() + static_cast<std::ptrdiff_t>(first * 6), B * 6, one.input().begin());
      one.forward();
      for (std::size_t k = 0; k < B * 3; ++k) EXPECT_NEAR(one.output()[k], train.output()[first * 3 + k], 1e-12);
    }
  }
}
TEST(parameter_store, a_small_program_sees_every_step_of_the_training_program) {
  check_small_program_follows<net, 1>();
  check_small_program_follows<bn_net, 2>();
}

TEST(parameter_store, outlives_the_program_that_made_it) {
  std::unique_ptr<decltype(compile<net, batch<1>>())> one;
  std::vector<float> trained;
  {
    auto train = compile<net, batch<16>>(4);
    for (float& w : train.parameters()) w *= 0.5f;
    trained = values(train.parameters());
    one = std::make_unique<decltype(compile<net, batch<1>>())>(train.store());
  }
  EXPECT_EQ(values(one->parameters()), trained);
  for (auto& x : one->input()) x = 0.25f;
  one->forward();
  for (float y : one->output()) EXPECT_TRUE(std::isfinite(y));
}

TEST(parameter_store, a_copied_program_has_its_own_store_and_an_assigned_one_writes_into_its_shared_store) {
  auto a = compile<net, batch<4>>(1);
  auto b = a;
  EXPECT_NE(b.store(), a.store());
  EXPECT_EQ(values(b.parameters()), values(a.parameters()));
  b.parameters()[0] += 1.0f;
  EXPECT_NE(b.parameters()[0], a.parameters()[0]);

  auto c = compile<net, batch<4>>(2);
  auto viewer = compile<net, batch<1>>(c.store());
  c = a;  // into c's store, which viewer shares
  EXPECT_EQ(values(viewer.parameters()), values(a.parameters()));
  EXPECT_EQ(viewer.seed(), 1u);

  auto moved = std::move(c);
  EXPECT_EQ(moved.store(), viewer.store());
}

TEST(parameter_store, refuses_a_null_store) {
  using P = decltype(compile<net, batch<4>>());
  EXPECT_THROW(P(std::shared_ptr<P::store_type>{}), std::invalid_argument);
}

TEST(parameter_store, draws_the_same_parameters_as_a_program_for_a_seed) {
  parameter_store<bn_net> s(9);
  const auto p = compile<bn_net, batch<4>>(9);
  EXPECT_EQ(values(s.parameters()), values(p.parameters()));
  EXPECT_EQ(values(s.state()), values(p.state()));
  EXPECT_EQ(s.seed(), 9u);
  EXPECT_EQ(s.step(), 0u);
  // A named parameter and a layer's parameter are views into the buffer.
  EXPECT_EQ((s.layer_parameter<1, 0>().data()), s.parameters().data());
  EXPECT_EQ((s.layer_parameter<1, 0>().size()), 6u * 8u);
}

// Adam's bias correction follows the store's step count: a program at step
// 5 takes Adam's sixth update, exactly as the optimizer does by hand.
TEST(parameter_store, adams_step_number_is_the_stores_step_count) {
  using P = decltype(compile<bn_net, batch<8>, precision<double>>());
  P a(6);
  a.set_step(5);
  P b = a;
  const adam o{.lr = 0.01f};
  adam::state<double> sa(a.parameters().size()), sb(b.parameters().size());
  rng g(3);
  std::vector<std::uint32_t> t(8);
  fill(a, t, g);
  std::copy(a.input().begin(), a.input().end(), b.input().begin());
  train_step(a, t, o, sa);
  EXPECT_EQ(a.step(), 6u);
  b.forward();
  b.backward(t);
  sb.step(o, b.parameters(), b.gradients(), 6);
  EXPECT_EQ(values(a.parameters()), values(b.parameters()));

  // and it matters: the same update numbered 1 differs.
  P c(6);
  adam::state<double> sc(c.parameters().size());
  std::copy(b.input().begin(), b.input().end(), c.input().begin());
  train_step(c, t, o, sc);
  EXPECT_NE(values(c.parameters()), values(a.parameters()));
}

// The trainer counts with the store: a program trained by one trainer and
// then by another (or viewed by a batch-1 program) has one step count.
TEST(parameter_store, the_trainer_counts_steps_in_the_store) {
  auto p = compile<net, batch<8>>(2);
  auto viewer = compile<net, batch<1>>(p.store());
  dataset d{.name = "store test", .sample_shape = {6}, .features = std::vector<float>(40 * 6), .labels = {}, .targets = {}, .target_size = 0};
  rng g(5);
  for (auto& v : d.features) v = static_cast<float>(g.uniform(-1, 1));
  for (int i = 0; i < 40; ++i) d.labels.push_back(static_cast<std::uint32_t>(g.below(3)));
  trainer first{p, sgd{.lr = 0.1f}};
  first.fit(d, epochs{1}, {.output = nullptr});
  EXPECT_EQ(first.steps_done(), 5u);
  EXPECT_EQ(viewer.step(), 5u);
  trainer second{p, sgd{.lr = 0.1f}};
  EXPECT_EQ(second.steps_done(), 5u);
}

TEST(parameter_store, is_what_a_checkpoint_saves_and_loads) {
  const auto file = std::filesystem::temp_directory_path() / "kiln_parameter_store_test.kiln";
  auto p = compile<bn_net, batch<8>>(8);
  p.parameters()[3] = 0.75f;
  p.state()[0] = 0.5f;
  save_checkpoint(file, *p.store());
  parameter_store<bn_net> loaded(1);
  load_checkpoint(file, loaded);
  EXPECT_EQ(values(loaded.parameters()), values(p.parameters()));
  EXPECT_EQ(values(loaded.state()), values(p.state()));
  std::filesystem::remove(file);
}

}  // namespace
