// The f32 activations, softmax and cross-entropy (kiln's vectorised
// functions) against the same layers in f64 (std:: per element): forward
// values and input gradients agree to a few f32 roundings.
#include <kiln/compile.hpp>
#include <kiln/layers/gelu.hpp>
#include <kiln/layers/sigmoid.hpp>
#include <kiln/layers/softmax.hpp>
#include <kiln/layers/tanh.hpp>
#include <kiln/losses/mse.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {
using namespace kiln;

/// 2 × 67 inputs spread over [−span, span].
std::vector<float> inputs(std::size_t n, double span) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(span * (2.0 * static_cast<double>((i * 37) % n) / static_cast<double>(n) - 1));
  return x;
}

/// Layer's forward in f32 and in f64 over the same inputs: every output
/// within `tol` × max(|f64 value|, 1e-3).
template <class Layer, class In = input<67>>
void expect_forward_matches_f64(double span, double tol) {
  auto f = compile<model<In, Layer>, batch<2>, precision<float>, mse>(1);
  auto d = compile<model<In, Layer>, batch<2>, precision<double>, mse>(1);
  const std::vector<float> x = inputs(f.input().size(), span);
  std::copy(x.begin(), x.end(), f.input().begin());
  std::copy(x.begin(), x.end(), d.input().begin());
  f.forward();
  d.forward();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = d.output()[i];
    EXPECT_NEAR(f.output()[i], want, tol * std::max(std::abs(want), 1e-3)) << "x = " << x[i];
  }
}

/// An element-wise layer's input gradient in f32 and in f64 from the same
/// values (x for gelu; for tanh and sigmoid the f32 forward's y), with
/// dy = 1 − x/10.
template <class Fn, bool FromInput>
void expect_backward_matches_f64(double span, double tol) {
  const std::vector<float> x = inputs(134, span);
  std::vector<double> xd(x.begin(), x.end()), dyd(x.size()), yd(x.size()), dxd(x.size());
  std::vector<float> dy(x.size()), y(x.size()), dx(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) dyd[i] = dy[i] = 1.0f - x[i] / 10;
  using af = Eigen::Array<float, Eigen::Dynamic, 1>;
  using ad = Eigen::Array<double, Eigen::Dynamic, 1>;
  const auto n = static_cast<Eigen::Index>(x.size());
  Eigen::Map<af> yf_map(y.data(), n), dxf(dx.data(), n);
  Eigen::Map<ad> dxd_map(dxd.data(), n);
  Fn::forward(Eigen::Map<const af>(x.data(), n), yf_map);
  std::copy(y.begin(), y.end(), yd.begin());  // the same y: 1 − y² near y = ±1 magnifies its rounding
  if constexpr (FromInput) {
    Fn::backward_from_input(Eigen::Map<const af>(x.data(), n), Eigen::Map<const af>(dy.data(), n), dxf);
    Fn::backward_from_input(Eigen::Map<const ad>(xd.data(), n), Eigen::Map<const ad>(dyd.data(), n), dxd_map);
  } else {
    Fn::backward(Eigen::Map<const af>(y.data(), n), Eigen::Map<const af>(dy.data(), n), dxf);
    Fn::backward(Eigen::Map<const ad>(yd.data(), n), Eigen::Map<const ad>(dyd.data(), n), dxd_map);
  }
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_NEAR(dx[i], dxd[i], tol * std::max(std::abs(dxd[i]), 1e-3)) << "x = " << x[i];
  if constexpr (requires { Fn::needs_input_and_output; }) {
    // what an f32 layer runs: the derivative given x and its stored y (gelu: Φ = y / x)
    std::vector<float> dx_xy(x.size());
    Eigen::Map<af> dx_xy_map(dx_xy.data(), n);
    Fn::backward_from_input_and_output(Eigen::Map<const af>(x.data(), n), Eigen::Map<const af>(y.data(), n),
                                       Eigen::Map<const af>(dy.data(), n), dx_xy_map);
    for (std::size_t i = 0; i < x.size(); ++i)
      EXPECT_NEAR(dx_xy[i], dxd[i], tol * std::max(std::abs(dxd[i]), 1e-3)) << "x = " << x[i];
  }
}

TEST(activations_f32, gelu_matches_f64) {
  expect_forward_matches_f64<gelu>(5, 4e-6);
  expect_backward_matches_f64<detail::gelu_fn, true>(5, 4e-6);
}
/// The element-wise binding as a program's engine calls it (a context with
/// the layer's stored input and output and the incoming gradient).
template <bool Bf16, class A>
struct elementwise_context {
  using scalar = float;
  using activation = A;
  static constexpr std::size_t batch = 2;
  static constexpr bool bf16_activations = Bf16;
  const A* x;
  const A* y;
  const float* dy;
  float* dx;
};

TEST(activations_f32, an_f32_gelu_layer_takes_phi_from_its_stored_output_a_bf16_one_from_its_input) {
  using layer = gelu::bind<shape<67>, 0>;
  const std::vector<float> x = inputs(134, 5);
  std::vector<float> y(x.size()), dy(x.size()), dx(x.size()), from_y(x.size()), from_x(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) dy[i] = 1.0f - x[i] / 10;
  detail::vmath::gelu(x.data(), y.data(), x.size());
  layer::backward(elementwise_context<false, float>{x.data(), y.data(), dy.data(), dx.data()});
  detail::vmath::gelu_backward(x.data(), y.data(), dy.data(), from_y.data(), x.size());
  detail::vmath::gelu_backward(x.data(), dy.data(), from_x.data(), x.size());
  std::size_t apart = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(dx[i]), std::bit_cast<std::uint32_t>(from_y[i])) << "x = " << x[i];
    apart += from_y[i] != from_x[i];
  }
  EXPECT_GT(apart, 0u) << "these inputs do not tell the two forms apart";

  // bf16 activations: y has 8 bits, so Φ comes from the (widened) input
  std::vector<bf16> xb(x.size()), yb(x.size());
  std::vector<float> xw(x.size()), want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    xb[i] = bf16::from(x[i]);
    xw[i] = static_cast<float>(xb[i]);
    yb[i] = bf16::from(y[i]);
  }
  layer::backward(elementwise_context<true, bf16>{xb.data(), yb.data(), dy.data(), dx.data()});
  detail::vmath::gelu_backward(xw.data(), dy.data(), want.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(std::bit_cast<std::uint32_t>(dx[i]), std::bit_cast<std::uint32_t>(want[i])) << "x = " << x[i];
}
TEST(activations_f32, tanh_matches_f64) {
  expect_forward_matches_f64<kiln::tanh>(5, 2e-6);
  expect_backward_matches_f64<detail::tanh_fn, false>(5, 4e-6);
}
TEST(activations_f32, sigmoid_matches_f64) {
  expect_forward_matches_f64<sigmoid>(12, 2e-6);
  expect_backward_matches_f64<detail::sigmoid_fn, false>(12, 4e-6);
}
TEST(activations_f32, softmax_rows_match_f64) { expect_forward_matches_f64<softmax, input<3, 29>>(8, 4e-6); }

TEST(activations_f32, cross_entropy_matches_f64) {
  using ce = softmax_cross_entropy<>::bind<shape<4, 37>>;  // 4 positions of 37 classes per sample
  std::vector<float> z(2 * 4 * 37), dzf(z.size());
  std::vector<double> zd(z.size()), dzd(z.size());
  for (std::size_t i = 0; i < z.size(); ++i) zd[i] = z[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * 6);
  const std::vector<std::uint32_t> t{0, 5, 36, 17, 2, 2, 30, 11};
  const auto rf = ce::evaluate(z.data(), t.data(), 2, 2, dzf.data());
  const auto rd = ce::evaluate(zd.data(), t.data(), 2, 2, dzd.data());
  EXPECT_NEAR(rf.loss, rd.loss, 1e-6 * rd.loss);
  EXPECT_EQ(rf.correct, rd.correct);
  for (std::size_t i = 0; i < z.size(); ++i) EXPECT_NEAR(dzf[i], dzd[i], 4e-7 * std::max(std::abs(dzd[i]), 1e-3)) << i;
  // The f32 gradient has the bits of the scalar formula with std::exp (kiln's
  // vectorised expf rounds as glibc's): f32 training results did not move.
  for (std::size_t s = 0; s < 8; ++s) {
    const float* col = z.data() + s * 37;
    const float m = *std::max_element(col, col + 37);
    float denom = 0;
    for (std::size_t c = 0; c < 37; ++c) denom += std::exp(col[c] - m);
    const float log_denom = std::log(denom), inv = 1.0f / 8;
    for (std::size_t c = 0; c < 37; ++c) {
      const float want = std::exp(col[c] - m - log_denom) * inv - (c == t[s] ? inv : 0.0f);
      EXPECT_EQ(dzf[s * 37 + c], want) << s << " " << c;
    }
  }
  // Without a gradient buffer the loss is the same, bit for bit.
  EXPECT_EQ(ce::evaluate(z.data(), t.data(), 2, 2, static_cast<float*>(nullptr)).loss, rf.loss);
}
}  // namespace
