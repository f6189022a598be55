// Tied weights: one storage per tag, the sum of every use's gradient, and ties
// that survive copies. Finite differences in double; PyTorch agreement is in
// reference/torch_optimizer_steps.py (the tied case).
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/gradient_check.hpp"

namespace {
using namespace kiln;
struct shared_w;   // the tie of the seeds' example
struct tok_embed;  // embedding ↔ unembed

// dense 32→10, dense 10→32, dense 32→10, no bias, the first and third tied.
using chain =
    model<input<32>, dense<10, no_bias, tied<shared_w>>, dense<32, no_bias>, dense<10, no_bias, tied<shared_w>>>;
using chain_untied = model<input<32>, dense<10, no_bias>, dense<32, no_bias>, dense<10, no_bias>>;
// A tied autoencoder: the decoder reads the encoder's weight transposed.
using autoencoder = model<input<12>, dense<5, tied<shared_w>>, kiln::tanh, dense<12, tied_transposed<shared_w>>>;
// Embedding and unembed share the table.
using lm =
    model<input_tokens<4>, embedding<7, 3, tied<tok_embed>>, flatten, dense<3>, kiln::tanh, unembed<tied<tok_embed>>>;
using seq_lm = model<input_tokens<5>, embedding<9, 4, tied<tok_embed>>, kiln::tanh, unembed<tied<tok_embed>>>;

// Compile-time: counted once, one offset, Lightning's parameter-count check as a static_assert.
static_assert(chain::parameter_count == 10 * 32 + 32 * 10);
static_assert(chain_untied::parameter_count == chain::parameter_count + 10 * 32);
static_assert(chain::parameters::tensor_count == 2);
static_assert(autoencoder::parameter_count == 5 * 12 + 5 + 12);
static_assert(lm::parameter_count == 7 * 3 + 12 * 3 + 3);
static_assert(lm::output_shape == shape<7>{});
static_assert(seq_lm::output_shape == shape<5, 9>{});

TEST(tied, uses_alias_one_storage) {
  auto p = compile<chain, batch<4>>(1);
  EXPECT_EQ(p.layer_parameter<1>().data(), p.layer_parameter<3>().data());
  EXPECT_EQ(p.layer_gradient<1>().data(), p.layer_gradient<3>().data());
  EXPECT_NE(p.layer_parameter<1>().data(), p.layer_parameter<2>().data());
  auto a = compile<autoencoder, batch<2>>(1);
  const auto enc_w = a.layer_parameter<1, 0>(), dec_w = a.layer_parameter<3, 0>();
  const auto enc_b = a.layer_parameter<1, 1>(), dec_b = a.layer_parameter<3, 1>();
  EXPECT_EQ(enc_w.data(), dec_w.data());
  EXPECT_NE(enc_b.data(), dec_b.data());  // biases are their own
  auto l = compile<lm, batch<2>>(1);
  EXPECT_EQ(l.parameter<tok_embed>().data(), l.layer_parameter<5>().data());
}

TEST(tied, chain_gradients_match_finite_differences) {
  auto p = compile<chain, batch<3>, precision<double>>(2);
  kiln::testing::expect_gradients_match_finite_differences(p, kiln::testing::random_batch(p, 1));
}

TEST(tied, transposed_tie_gradients_match_finite_differences) {
  auto p = compile<autoencoder, batch<3>, precision<double>, mse>(3);
  rng g(1);
  for (auto& w : p.parameters()) w += 0.1 * g.uniform(-1, 1);
  kiln::testing::expect_gradients_match_finite_differences(p, kiln::testing::random_batch(p, 2));
}

TEST(tied, embedding_unembed_gradients_match_finite_differences) {
  auto p = compile<lm, batch<3>, precision<double>>(4);
  kiln::testing::expect_gradients_match_finite_differences(p, kiln::testing::random_batch(p, 3));
  auto q = compile<seq_lm, batch<2>, precision<double>>(5);
  kiln::testing::expect_gradients_match_finite_differences(q, kiln::testing::random_batch(q, 4));
}

// The tied gradient is the sum of what each use would get on its own.
TEST(tied, gradient_is_the_sum_of_the_uses) {
  auto tied_p = compile<chain, batch<4>, precision<double>>(6);
  auto free_p = compile<chain_untied, batch<4>, precision<double>>(0);
  std::copy_n(tied_p.layer_parameter<1>().data(), 320, free_p.layer_parameter<1>().data());
  std::copy_n(tied_p.layer_parameter<2>().data(), 320, free_p.layer_parameter<2>().data());
  std::copy_n(tied_p.layer_parameter<3>().data(), 320, free_p.layer_parameter<3>().data());
  const auto t = kiln::testing::random_batch(tied_p, 5);
  std::copy(tied_p.input().begin(), tied_p.input().end(), free_p.input().begin());
  tied_p.forward();
  free_p.forward();
  const double l1 = tied_p.backward(t).loss, l2 = free_p.backward(t).loss;
  EXPECT_DOUBLE_EQ(l1, l2);
  for (std::size_t i = 0; i < 320; ++i) {
    EXPECT_NEAR(tied_p.layer_gradient<1>()[i], free_p.layer_gradient<1>()[i] + free_p.layer_gradient<3>()[i], 1e-12);
  }
}

TEST(tied, ties_survive_a_copy_and_a_parameter_transfer) {
  auto p = compile<chain, batch<4>>(7);
  auto q = p;  // a copy of the program
  EXPECT_EQ(q.layer_parameter<1>().data(), q.layer_parameter<3>().data());
  EXPECT_EQ(0, std::memcmp(p.parameters().data(), q.parameters().data(), p.parameters().size_bytes()));
  q.layer_parameter<1>()[5] = 42.0f;  // written through one use, read through the other
  EXPECT_EQ(q.layer_parameter<3>()[5], 42.0f);
  EXPECT_NE(p.layer_parameter<3>()[5], 42.0f);
  auto r = compile<chain, batch<1>, precision<double>>(0);  // another batch and precision
  r.assign_parameters(q);
  EXPECT_EQ(r.layer_parameter<3>()[5], 42.0);
  EXPECT_EQ(r.layer_parameter<1>().data(), r.layer_parameter<3>().data());
  EXPECT_EQ(decltype(r)::model_type::parameter_count, chain::parameter_count);
}

TEST(tied, summary_shows_who_shares_what) {
  const std::string s = lm::summary();
  EXPECT_NE(s.find("tok_embed with layer 5"), std::string::npos) << s;
  EXPECT_NE(s.find("tok_embed with layer 1"), std::string::npos) << s;
  const std::string c = chain::summary();
  EXPECT_NE(c.find("shared_w with layer 3"), std::string::npos) << c;
  EXPECT_NE(c.find("total parameters: 640"), std::string::npos) << c;
}

// The signature names no type, only what defines the model: the tags here
// live in an anonymous namespace, which g++ and clang spell differently,
// and both builds of this test check the same literal (checkpoints carry it).
TEST(tied, the_signature_is_the_same_text_on_every_compiler) {
  EXPECT_EQ(lm::signature(),
            "input shape<4>\n"
            "layer 1 embedding<7, 3, tied> shape<4> -> shape<4, 3>\n"
            "layer 2 flatten shape<4, 3> -> shape<12>\n"
            "layer 3 dense<3> shape<12> -> shape<3>\n"
            "layer 4 tanh shape<3> -> shape<3>\n"
            "layer 5 unembed<tied> shape<3> -> shape<7>\n"
            "param 0 shape<7, 3> at 0 used by 1, 5\n"
            "param 1 shape<3, 12> at 32 used by 3\n"
            "param 2 shape<3> at 80 used by 3\n");
  EXPECT_EQ(autoencoder::signature(),
            "input shape<12>\n"
            "layer 1 dense<5, tied> shape<12> -> shape<5>\n"
            "layer 2 tanh shape<5> -> shape<5>\n"
            "layer 3 dense<12, tied_transposed> shape<5> -> shape<12>\n"
            "param 0 shape<5, 12> at 0 used by 1, 3\n"
            "param 1 shape<5> at 64 used by 1\n"
            "param 2 shape<12> at 80 used by 3\n");
  EXPECT_EQ(chain::positions_using<shared_w>(), (std::vector<std::size_t>{1, 3}));
}

TEST(embedding, rejects_token_ids_out_of_range_with_where_and_what) {
  auto p = compile<lm, batch<2>>(1);
  std::fill(p.input().begin(), p.input().end(), 1.0f);
  p.input()[6] = 7.0f;  // sample 1, position 2: vocab is 7
  try {
    p.forward();
    FAIL() << "no exception";
  } catch (const std::out_of_range& e) {
    EXPECT_STREQ(e.what(),
                 "kiln::embedding<7, 3, tied> (layer 1): token 7 at position 2 of sample 1 of the batch is "
                 "not a token id in [0, 7)");
  }
  p.input()[6] = 2.5f;
  EXPECT_THROW(p.forward(), std::out_of_range);
  p.input()[6] = -1.0f;
  EXPECT_THROW(p.forward(), std::out_of_range);
}

TEST(embedding, looks_up_rows) {
  auto p = compile<model<input_tokens<3>, embedding<4, 2>>, batch<1>, mse>(1);
  auto e = p.layer_parameter<1>();
  for (std::size_t i = 0; i < e.size(); ++i) e[i] = static_cast<float>(i);
  p.input()[0] = 3;
  p.input()[1] = 0;
  p.input()[2] = 3;
  p.forward();
  EXPECT_EQ(std::vector<float>(p.output().begin(), p.output().end()), (std::vector<float>{6, 7, 0, 1, 6, 7}));
}
}  // namespace

namespace {
TEST(embedding, backward_checks_ids_again) {
  auto p = compile<lm, batch<2>>(1);
  std::fill(p.input().begin(), p.input().end(), 1.0f);
  p.forward();
  p.input()[3] = 1e6f;  // changed after forward
  const std::vector<std::uint32_t> t{0, 1};
  EXPECT_THROW(p.backward(t), std::out_of_range);
}
}  // namespace
