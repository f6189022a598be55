// conv2d, max_pool and avg_pool: finite differences in double, forward values
// against a direct loop, and their compile-time shapes. (PyTorch comparison:
// reference/torch_optimizer_steps.py, the cnn cases.)
#include <kiln/compile.hpp>
#include <kiln/layers/conv2d.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/flatten.hpp>
#include <kiln/layers/pool.hpp>
#include <kiln/layers/relu.hpp>
#include <kiln/layers/tanh.hpp>
#include <kiln/losses/mse.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "../support/gradient_check.hpp"

namespace {
using namespace kiln;

static_assert(std::is_same_v<conv2d<16, 5, 1, same>::bind<shape<1, 28, 28>, 1>::output_shape, shape<16, 28, 28>>);
static_assert(std::is_same_v<conv2d<8, 3, 2, 1>::bind<shape<3, 9, 9>, 1>::output_shape, shape<8, 5, 5>>);
static_assert(std::is_same_v<conv2d<4, 3>::bind<shape<2, 5, 7>, 1>::output_shape, shape<4, 3, 5>>);
static_assert(std::is_same_v<max_pool<2>::bind<shape<16, 28, 28>, 1>::output_shape, shape<16, 14, 14>>);
static_assert(std::is_same_v<avg_pool<3, 2>::bind<shape<2, 7, 8>, 1>::output_shape, shape<2, 3, 3>>);
using cnn = model<input<1, 28, 28>, conv2d<16, 5, 1, same>, relu, max_pool<2>, conv2d<32, 5, 1, same>, relu,
                  max_pool<2>, flatten, dense<10>>;
static_assert(cnn::parameter_count == (16 * 25 + 16) + (32 * 16 * 25 + 32) + (32 * 7 * 7 * 10 + 10));

using kiln::testing::case_;
using cases = ::testing::Types<
    case_<model<input<2, 5, 6>, conv2d<3, 3>>, mse>,                                          // valid padding
    case_<model<input<2, 5, 5>, conv2d<3, 3, 1, same>, kiln::tanh, flatten, dense<4>>, mse>,  // same padding
    case_<model<input<1, 7, 6>, conv2d<2, 3, 2, 1>, relu, conv2d<2, 2>>, mse>,  // stride 2, pad 1, stacked
    case_<model<input<2, 6, 6>, conv2d<3, 3, 1, 1>, max_pool<2>, flatten, dense<3>>, softmax_cross_entropy<>>,
    case_<model<input<2, 7, 7>, conv2d<2, 2>, avg_pool<3, 2>, flatten, dense<3>>, softmax_cross_entropy<>>>;
struct case_names {
  template <class T>
  static std::string GetName(int i) {
    constexpr const char* names[] = {"conv_valid", "conv_same", "conv_stride_pad", "max_pool", "avg_pool"};
    return names[i];
  }
};

template <class C>
class conv_gradient : public ::testing::Test {};
TYPED_TEST_SUITE(conv_gradient, cases, case_names);

TYPED_TEST(conv_gradient, matches_finite_differences) {
  kiln::testing::expect_case_gradients_match<TypeParam, 2>(3, 2e-6);
}

// The input gradient too: a conv layer after another one receives it.
TEST(conv2d, forward_matches_the_definition) {
  using net = model<input<2, 4, 5>, conv2d<3, 3, 2, 1>>;
  auto p = compile<net, batch<1>, precision<double>, mse>(1);
  rng g(2);
  for (auto& w : p.parameters()) w = g.uniform(-1, 1);
  for (auto& x : p.input()) x = g.uniform(-1, 1);
  p.forward();
  const auto W = p.layer_parameter<1, 0>(), b = p.layer_parameter<1, 1>();
  const auto x = p.input();
  for (std::size_t f = 0; f < 3; ++f)
    for (std::size_t i = 0; i < 2; ++i)
      for (std::size_t j = 0; j < 3; ++j) {
        double acc = b[f];
        for (std::size_t c = 0; c < 2; ++c)
          for (std::size_t u = 0; u < 3; ++u)
            for (std::size_t v = 0; v < 3; ++v) {
              const long r = long(i * 2 + u) - 1, q = long(j * 2 + v) - 1;
              if (r >= 0 && r < 4 && q >= 0 && q < 5) acc += W[((f * 2 + c) * 3 + u) * 3 + v] * x[(c * 4 + r) * 5 + q];
            }
        EXPECT_NEAR(p.output()[(f * 2 + i) * 3 + j], acc, 1e-12);
      }
}

TEST(pooling, forward_values) {
  auto mp = compile<model<input<1, 4, 4>, max_pool<2>>, batch<1>, precision<double>, mse>();
  auto ap = compile<model<input<1, 4, 4>, avg_pool<2>>, batch<1>, precision<double>, mse>();
  for (std::size_t i = 0; i < 16; ++i) mp.input()[i] = ap.input()[i] = double((i * 7) % 16);
  mp.forward();
  ap.forward();
  // windows {0,7,12,3}, {14,5,10,1}, {8,15,4,11}, {6,13,2,9}
  EXPECT_EQ(std::vector<double>(mp.output().begin(), mp.output().end()), (std::vector<double>{12, 14, 15, 13}));
  EXPECT_EQ(std::vector<double>(ap.output().begin(), ap.output().end()), (std::vector<double>{5.5, 7.5, 9.5, 7.5}));
}

// max_pool's contract, on both of its paths (float takes the AVX-512 or
// AVX2 kernel for 2 × 2 windows, double the plain loops): the window's maximum, NaN if
// the window holds one, and the gradient to the first maximum in row-major
// order. Values drawn from {0, 1, 2} make ties common; odd extents leave a
// row and a column outside every window (their gradient is zero).
template <class T>
class max_pool_contract : public ::testing::Test {};
using pool_scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(max_pool_contract, pool_scalars);

template <class T, std::size_t W>
void check_max_pool_contract() {
  constexpr std::size_t C = 2, H = 5, Ho = 2, Wo = W / 2;
  using bound = max_pool<2>::bind<shape<C, H, W>, 1>;
  constexpr std::size_t B = 2;
  std::vector<T> x(B * C * H * W), y(B * C * Ho * Wo), dy(y.size()), dx(x.size(), T(-7));
  rng g(3);
  for (auto& v : x) v = T(g.below(3));
  x[3 * W + 8] = std::numeric_limits<T>::quiet_NaN();  // plane 0, window (1, 4)
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = T(i + 1);
  detail::layer_context<T, B, detail::parameter_layout<>> c;
  c.x = x.data(), c.y = y.data(), c.dy = dy.data(), c.dx = dx.data();
  bound::forward(c);
  bound::backward(c);
  std::vector<T> want_dx(x.size(), T(0));
  for (std::size_t plane = 0; plane < B * C; ++plane)
    for (std::size_t i = 0; i < Ho; ++i)
      for (std::size_t j = 0; j < Wo; ++j) {
        const std::size_t o = plane * Ho * Wo + i * Wo + j;
        std::size_t first = 0;
        T best = -1;
        bool nan = false;
        for (std::size_t u = 0; u < 2; ++u)
          for (std::size_t v = 0; v < 2; ++v) {
            const std::size_t at = plane * H * W + (2 * i + u) * W + 2 * j + v;
            nan = nan || std::isnan(x[at]);
            if (x[at] > best) best = x[at], first = at;
          }
        if (nan) {
          EXPECT_TRUE(std::isnan(y[o])) << W << " columns, window " << o;
        } else {
          EXPECT_EQ(y[o], best) << W << " columns, window " << o;
          want_dx[first] = dy[o];
        }
      }
  EXPECT_TRUE(std::isnan(y[Wo + 4]));
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(dx[i], want_dx[i]) << W << " columns, element " << i;
}

// (19 columns: a vector of 8 windows and a tail of 1; 15: a tail of 7, in
// two halves, and 4 + 3 windows backward with AVX2; 23: 8 + 3, and 4 + 4 + 3;
// 27: 8 + 5, the tail's second half 2 columns; 20: 8 + 2 and 4 + 4 + 2, even
// extents, where the backward writes every element itself; 12: 6)
TYPED_TEST(max_pool_contract, ties_go_to_the_first_maximum_and_nan_propagates) {
  check_max_pool_contract<TypeParam, 19>();
  check_max_pool_contract<TypeParam, 15>();
  check_max_pool_contract<TypeParam, 23>();
  check_max_pool_contract<TypeParam, 27>();
  check_max_pool_contract<TypeParam, 20>();
  check_max_pool_contract<TypeParam, 12>();
}

// avg_pool<2> in float, bit for bit: the vector kernels sum each window's
// columns first, ((x00 + x10) + (x01 + x11)) · ¼, the plain loop in
// row-major order, (((0 + x00) + x01) + x10) + x11) / 4; each element's
// gradient is dy · ¼ (dy / 4 in the loop). Tails as above.
template <std::size_t W>
void check_avg_pool_bits() {
  constexpr std::size_t C = 2, H = 6, Ho = 3, Wo = W / 2, B = 2;
  using bound = avg_pool<2>::bind<shape<C, H, W>, 1>;
  std::vector<float> x(B * C * H * W), y(B * C * Ho * Wo), dy(y.size()), dx(x.size(), -7.0f);
  rng g(11);
  for (auto& v : x) v = static_cast<float>(g.uniform(-1, 1));
  for (auto& v : dy) v = static_cast<float>(g.uniform(-1, 1));
  detail::layer_context<float, B, detail::parameter_layout<>> c;
  c.x = x.data(), c.y = y.data(), c.dy = dy.data(), c.dx = dx.data();
  bound::forward(c);
  bound::backward(c);
  std::vector<float> want_dx(x.size(), 0.0f);
  for (std::size_t plane = 0; plane < B * C; ++plane)
    for (std::size_t i = 0; i < Ho; ++i)
      for (std::size_t j = 0; j < Wo; ++j) {
        const float* w = x.data() + plane * H * W + 2 * i * W + 2 * j;
        const std::size_t o = plane * Ho * Wo + i * Wo + j;
        const float want = bound::template vectorised<float> ? ((w[0] + w[W]) + (w[1] + w[W + 1])) * 0.25f
                                                             : ((((0.0f + w[0]) + w[1]) + w[W]) + w[W + 1]) / 4.0f;
        EXPECT_EQ(std::bit_cast<std::uint32_t>(y[o]), std::bit_cast<std::uint32_t>(want))
            << W << " columns, window " << o;
        for (const std::size_t at : std::initializer_list<std::size_t>{0, 1, W, W + 1})
          want_dx[plane * H * W + 2 * i * W + 2 * j + at] = dy[o] / 4.0f;
      }
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(std::bit_cast<std::uint32_t>(dx[i]), std::bit_cast<std::uint32_t>(want_dx[i]))
        << W << " columns, element " << i;
}

TEST(pooling, avg_pool_float_has_the_bits_of_its_sums) {
  check_avg_pool_bits<19>();
  check_avg_pool_bits<15>();
  check_avg_pool_bits<23>();
  check_avg_pool_bits<27>();
  check_avg_pool_bits<20>();
  check_avg_pool_bits<12>();
}

// Where the output rows are as wide as the input's (stride 1, 'same'
// width), each row's window of the unfold may be stored as whole vectors
// running on into the next rows of its column: each output against the
// definition, in f32, for kernels 3, 5 and 7, planes narrower and wider
// than a vector, and more padding than the plane is wide.
template <class Net>
void expect_forward_matches_the_definition(std::size_t channels, std::size_t filters, std::size_t height,
                                           std::size_t width, std::size_t kernel, std::size_t pad) {
  auto p = compile<Net, batch<2>, precision<float>, mse>(1);
  rng g(4);
  for (auto& w : p.parameters()) w = static_cast<float>(g.uniform(-1, 1));
  for (auto& x : p.input()) x = static_cast<float>(g.uniform(-1, 1));
  p.forward();
  const auto W = p.template layer_parameter<1, 0>(), b = p.template layer_parameter<1, 1>();
  const std::size_t ho = height + 2 * pad - kernel + 1, wo = width + 2 * pad - kernel + 1;
  for (std::size_t s = 0; s < 2; ++s)
    for (std::size_t f = 0; f < filters; ++f)
      for (std::size_t i = 0; i < ho; ++i)
        for (std::size_t j = 0; j < wo; ++j) {
          double acc = b[f], magnitude = std::abs(b[f]);
          for (std::size_t c = 0; c < channels; ++c)
            for (std::size_t u = 0; u < kernel; ++u)
              for (std::size_t v = 0; v < kernel; ++v) {
                const long r = long(i + u) - long(pad), q = long(j + v) - long(pad);
                if (r < 0 || r >= long(height) || q < 0 || q >= long(width)) continue;
                const double term = double(W[((f * channels + c) * kernel + u) * kernel + v]) *
                                    p.input()[s * channels * height * width + (c * height + std::size_t(r)) * width +
                                              std::size_t(q)];
                acc += term;
                magnitude += std::abs(term);
              }
          ASSERT_NEAR(p.output()[((s * filters + f) * ho + i) * wo + j], acc, 1e-6 * magnitude + 1e-7)
              << kernel << "x" << kernel << " on " << height << "x" << width << ": sample " << s << " filter " << f
              << " at " << i << ", " << j;
        }
}

TEST(conv2d, same_width_forward_matches_the_definition) {
  expect_forward_matches_the_definition<model<input<2, 6, 7>, conv2d<3, 3, 1, same>>>(2, 3, 6, 7, 3, 1);
  expect_forward_matches_the_definition<model<input<2, 9, 20>, conv2d<2, 5, 1, same>>>(2, 2, 9, 20, 5, 2);
  expect_forward_matches_the_definition<model<input<1, 4, 3>, conv2d<2, 5, 1, same>>>(1, 2, 4, 3, 5, 2);
  expect_forward_matches_the_definition<model<input<1, 28, 28>, conv2d<4, 5, 1, same>>>(1, 4, 28, 28, 5, 2);
  expect_forward_matches_the_definition<model<input<2, 3, 3>, conv2d<2, 7, 1, same>>>(2, 2, 3, 3, 7, 3);
}

// conv2d and the pools run vectorised copies in float on AVX-512 or AVX2 targets and
// plain loops in double: the two must agree on rows wider than one vector
// (37 and 18 columns: full, partial and padded chunks), on the input
// gradient (the second conv folds back into the first's output) and on the
// weight gradients.
TEST(conv2d, float_agrees_with_double_on_wide_rows) {
  using net = model<input<3, 20, 37>, conv2d<4, 5, 1, same>, kiln::tanh, max_pool<2>, conv2d<3, 3, 1, same>, kiln::tanh,
                    avg_pool<2>, conv2d<2, 3>, flatten, dense<5>>;
  auto pd = compile<net, batch<3>, precision<double>, mse>(5);
  auto pf = compile<net, batch<3>, precision<float>, mse>(5);
  const auto targets = kiln::testing::random_batch(pd, 6);
  std::copy(pd.parameters().begin(), pd.parameters().end(), pf.parameters().begin());
  std::copy(pd.input().begin(), pd.input().end(), pf.input().begin());
  pd.forward();
  pf.forward();
  pd.backward(targets, 3);
  pf.backward(targets, 3);
  double scale = 0;
  for (double o : pd.output()) scale = std::max(scale, std::abs(o));
  for (std::size_t i = 0; i < pd.output().size(); ++i)
    EXPECT_NEAR(pf.output()[i], pd.output()[i], 1e-5 * scale) << "output " << i;
  double gscale = 0;
  for (double g : pd.gradients()) gscale = std::max(gscale, std::abs(g));
  ASSERT_GT(gscale, 0.0);
  std::size_t nonzero = 0;
  for (std::size_t i = 0; i < pd.gradients().size(); ++i) {
    EXPECT_NEAR(pf.gradients()[i], pd.gradients()[i], 1e-4 * gscale) << "gradient " << i;
    nonzero += pd.gradients()[i] != 0;
  }
  EXPECT_GT(nonzero, pd.gradients().size() / 2);  // every layer's gradient is reached
}
}  // namespace
