// kiln's f32 exp, tanh, sigmoid, erf and GELU (kiln/detail/vector_math.hpp)
// against double std:: over dense sweeps of floats: the largest error in ulp
// is printed and bounded (docs/performance.md quotes these figures). The
// native pack (AVX-512 or AVX2, whichever this build targets) and the scalar
// pack give the same bits, tails included: results do not depend on the CPU.
// And the loss's expf (kiln/detail/libm_expf.hpp) has glibc's bits.
#include <kiln/fwd.hpp>

#include <kiln/detail/libm_expf.hpp>
#include <kiln/detail/vector_math.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <numbers>
#include <string>
#include <type_traits>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>  // (the two-lane exact_fma's operands)
#endif

namespace {
namespace vm = kiln::detail::vmath;
using array_fn = void (*)(const float*, float*, std::size_t);

/// Every `stride`-th float of [lo, hi] (both signs walked by bit pattern), and the two ends.
std::vector<float> sweep(float lo, float hi, std::uint32_t stride) {
  std::vector<float> xs;
  for (float x = lo; x <= hi;) {
    xs.push_back(x);
    const std::uint32_t b = std::bit_cast<std::uint32_t>(x);
    if (x < 0) {
      x = b - 0x80000000u > stride ? std::bit_cast<float>(b - stride) : 0.0f;
    } else {
      x = std::bit_cast<float>(b + stride);
    }
  }
  xs.push_back(hi);
  return xs;
}

/// The distance from `got` to `exact` in units of the float spacing at `exact`.
double ulp_error(float got, double exact) {
  if (got == exact) return 0;
  const int e = exact == 0 ? -126 : std::max(std::ilogb(exact), -126);
  return std::abs(static_cast<double>(got) - exact) / std::ldexp(1.0, e - 23);
}

struct worst {
  double ulp = 0;
  float at = 0;
};

/// The largest ulp error of `fn` against `exact` over `xs`, and that the
/// native and the scalar packs agree bit for bit on every value.
worst measure(const std::vector<float>& xs, array_fn native, array_fn scalar, const std::function<double(double)>& exact) {
  std::vector<float> y(xs.size()), ys(xs.size());
  native(xs.data(), y.data(), xs.size());
  scalar(xs.data(), ys.data(), xs.size());
  worst w;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    differ += std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(ys[i]);
    const double e = ulp_error(y[i], exact(xs[i]));
    if (e > w.ulp) w = {e, xs[i]};
  }
  EXPECT_EQ(differ, 0u) << "values where the native pack and the scalar pack disagree";
  return w;
}

void report(const char* name, float lo, float hi, const worst& w) {
  std::printf("%-8s [%g, %g]: max error %.3f ulp (at %a)\n", name, lo, hi, w.ulp, static_cast<double>(w.at));
}

constexpr std::uint32_t stride = 257;  // ≈ 8 million floats per function

/// Every 257th float of [lo, hi]: printed, bounded by `bound` ulp.
void expect_within(const char* name, float lo, float hi, array_fn native, array_fn scalar,
                   const std::function<double(double)>& exact, double bound) {
  const worst w = measure(sweep(lo, hi, stride), native, scalar, exact);
  report(name, lo, hi, w);
  EXPECT_LE(w.ulp, bound) << name << " at " << w.at;
}

TEST(vector_math, exp_within_1_1_ulp) {
  expect_within("exp", -87.3f, 88.7f, vm::exp<>, vm::exp<vm::scalar_pack>, [](double x) { return std::exp(x); }, 1.1);
}
TEST(vector_math, tanh_within_1_5_ulp) {
  expect_within("tanh", -10, 10, vm::tanh<>, vm::tanh<vm::scalar_pack>, [](double x) { return std::tanh(x); }, 1.5);
}
TEST(vector_math, sigmoid_within_2_5_ulp) {
  expect_within("sigmoid", -87, 20, vm::sigmoid<>, vm::sigmoid<vm::scalar_pack>,
                [](double x) { return 1 / (1 + std::exp(-x)); }, 2.5);
}
TEST(vector_math, erf_within_2_5_ulp) {
  expect_within("erf", -5, 5, vm::erf<>, vm::erf<vm::scalar_pack>, [](double x) { return std::erf(x); }, 2.5);
}

double gelu_exact(double x) { return 0.5 * x * std::erfc(-x / std::numbers::sqrt2); }

TEST(vector_math, gelu_within_8_ulp_above_minus_2) {
  expect_within("gelu", -2, 10, vm::gelu<>, vm::gelu<vm::scalar_pack>, gelu_exact, 8.0);
}

TEST(vector_math, gelu_left_tail_within_64_ulp_then_zero) {
  // Φ(x) = ½e^q there, q ≈ −x²/2: the rounding of x/√2 alone moves it by
  // x²·2⁻²⁴ relative (PyTorch's 1 + erf(x/√2) in f32 loses every digit there).
  const auto w = measure(sweep(-5.656f, -2, stride / 16), vm::gelu<>, vm::gelu<vm::scalar_pack>, gelu_exact);
  report("gelu", -5.656f, -2, w);
  EXPECT_LE(w.ulp, 64.0) << "at " << w.at;
  // Below, erf's clamp at |x/√2| = 4 makes it −0: off by at most 4.3e-8.
  std::vector<float> x{-5.66f, -6, -20, -1e30f}, y(4);
  vm::gelu(x.data(), y.data(), 4);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(y[i], 0.0f) << x[i];
    EXPECT_LE(std::abs(y[i] - gelu_exact(x[i])), 4.3e-8) << x[i];
  }
}

/// The largest absolute error of gelu′ values d (at xs) against double
/// std::, after checking that the scalar pack gave the same bits (ds).
struct largest_error {
  double error = 0;
  float at = 0;
};
largest_error gelu_derivative_error(const std::vector<float>& xs, const std::vector<float>& d,
                                    const std::vector<float>& ds) {
  largest_error w;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(d[i]), std::bit_cast<std::uint32_t>(ds[i])) << xs[i];
    const double x = xs[i];
    const double exact = 0.5 * std::erfc(-x / std::numbers::sqrt2) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
    if (std::abs(d[i] - exact) > w.error) w = {std::abs(d[i] - exact), xs[i]};
  }
  return w;
}

TEST(vector_math, gelu_derivative_within_3e_7) {
  // Φ(x) + x·φ(x) cancels near its zero (x ≈ −0.75): the bound is absolute.
  const auto xs = sweep(-10, 10, stride);
  std::vector<float> ones(xs.size(), 1.0f), d(xs.size()), ds(xs.size());
  vm::gelu_backward(xs.data(), ones.data(), d.data(), xs.size());
  vm::gelu_backward<vm::scalar_pack>(xs.data(), ones.data(), ds.data(), xs.size());
  const largest_error w = gelu_derivative_error(xs, d, ds);
  std::printf("gelu'    [-10, 10]: max absolute error %.3g (at %a)\n", w.error, static_cast<double>(w.at));
  EXPECT_LE(w.error, 3e-7) << "at " << w.at;
}

TEST(vector_math, gelu_derivative_from_the_stored_output_within_3e_7) {
  // The f32 layer's backward takes Φ(x) = y / x from its stored output y =
  // gelu(x) (one division for Φ's two polynomials and exponential): the
  // same bound as Φ computed from x, the same bits in every pack.
  const auto xs = sweep(-10, 10, stride);
  std::vector<float> ys(xs.size()), ones(xs.size(), 1.0f), d(xs.size()), ds(xs.size()), from_x(xs.size());
  vm::gelu(xs.data(), ys.data(), xs.size());
  vm::gelu_backward(xs.data(), ys.data(), ones.data(), d.data(), xs.size());
  vm::gelu_backward<vm::scalar_pack>(xs.data(), ys.data(), ones.data(), ds.data(), xs.size());
  vm::gelu_backward(xs.data(), ones.data(), from_x.data(), xs.size());
  const largest_error w = gelu_derivative_error(xs, d, ds);
  double worst_apart = 0;
  for (std::size_t i = 0; i < xs.size(); ++i)
    worst_apart = std::max(worst_apart, static_cast<double>(std::abs(d[i] - from_x[i])));
  std::printf("gelu' from y = gelu(x), [-10, 10]: max absolute error %.3g (at %a); %.3g from Phi(x)'s\n", w.error,
              static_cast<double>(w.at), worst_apart);
  EXPECT_LE(w.error, 3e-7) << "at " << w.at;
  EXPECT_GT(worst_apart, 0) << "the quotient is not what was computed";

  // 0, the tiny, the huge, ±inf and NaN take Φ(x) itself, lane by lane,
  // whatever their neighbours (here in the middle of a pack of ordinary values).
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (float odd : {0.0f, -0.0f, 0x1p-120f, -0x1p-110f, 0x1p101f, -0x1p120f, inf, -inf,
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> x(21);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = -2.5f + 0.25f * static_cast<float>(i);
    x[7] = odd;
    std::vector<float> y(x.size()), one(x.size(), 1.0f), got(x.size()), expect(x.size()), scalar(x.size());
    vm::gelu(x.data(), y.data(), x.size());
    vm::gelu_backward(x.data(), y.data(), one.data(), got.data(), x.size());
    vm::gelu_backward<vm::scalar_pack>(x.data(), y.data(), one.data(), scalar.data(), x.size());
    vm::gelu_backward(x.data(), one.data(), expect.data(), x.size());
    if (std::isnan(odd)) {
      EXPECT_TRUE(std::isnan(got[7]));
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(got[7]), std::bit_cast<std::uint32_t>(expect[7])) << odd;
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (i != 7 || !std::isnan(odd)) {
        EXPECT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(scalar[i])) << odd << " " << i;
      }
      if (i != 7) {
        EXPECT_NEAR(got[i], expect[i], 3e-7) << odd << " " << i;
      }
    }
  }
}

/// Bits of a float (a NaN as a canonical pattern, so NaN payloads compare equal).
std::uint32_t bits_of(float v) { return std::isnan(v) ? 0x7FC00000u : std::bit_cast<std::uint32_t>(v); }

TEST(vector_math, gelu_of_bf16_values_looks_up_the_kernels_own_bits) {
  // A bf16 program's gelu reads gelu and gelu′ of its (widened) bf16
  // activations from tables (detail/bf16_value_table.hpp): every one of the
  // 2¹⁶ bf16 values, and f32 values that are not bf16 values, must get the
  // bits vmath::gelu and gelu_backward compute, in every pack, whether the
  // pack was found in the table, partly found or not at all.
  std::vector<float> x;
  for (std::uint32_t b = 0; b < 0x10000u; ++b) x.push_back(std::bit_cast<float>(b << 16));
  std::vector<float> in_table;  // those the table holds, shuffled among the others below
  for (std::uint32_t i = 0; i < 2 * vm::bf16_value_table::count; ++i) in_table.push_back(vm::bf16_value_table::value(i));
  EXPECT_EQ(vm::bf16_value_table::value(0), 0x1p-16f);
  EXPECT_EQ(vm::bf16_value_table::value(vm::bf16_value_table::count - 1), 0x1.fep3f);
  EXPECT_EQ(vm::bf16_value_table::value(vm::bf16_value_table::count), -0x1p-16f);
  for (std::size_t i = 0; i < in_table.size(); i += 37) x.push_back(std::nextafter(in_table[i], 100.0f));  // not bf16
  x.insert(x.end(), in_table.begin(), in_table.end());
  for (std::size_t i = 0; i < 3000; ++i) x.push_back(in_table[(i * 7919) % in_table.size()]);
  std::vector<float> dy(x.size());
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = 0.75f + 0.001f * static_cast<float>(i % 97);
  const auto expect_same = [&](const char* what, const std::vector<float>& want, const std::vector<float>& got) {
    std::size_t wrong = 0, first = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (bits_of(want[i]) != bits_of(got[i]) && wrong++ == 0) first = i;
    EXPECT_EQ(wrong, 0u) << what << ": first at x = " << x[first] << " (" << want[first] << " vs " << got[first] << ")";
  };
  std::vector<float> want(x.size()), got(x.size());
  vm::gelu(x.data(), want.data(), x.size());
  vm::gelu_of_bf16_values(x.data(), got.data(), x.size());
  expect_same("gelu, native pack", want, got);
  vm::gelu_of_bf16_values<vm::scalar_pack>(x.data(), got.data(), x.size());
  expect_same("gelu, scalar pack", want, got);
  vm::gelu_backward(x.data(), dy.data(), want.data(), x.size());
  vm::gelu_backward_of_bf16_values(x.data(), dy.data(), got.data(), x.size());
  expect_same("gelu', native pack", want, got);
  vm::gelu_backward_of_bf16_values<vm::scalar_pack>(x.data(), dy.data(), got.data(), x.size());
  expect_same("gelu', scalar pack", want, got);
  // every length: tails are looked up (or computed) like whole packs
  const float* mixed = x.data() + x.size() - 3000;
  for (std::size_t n = 1; n <= 40; ++n) {
    std::vector<float> y(n + 1, 42.0f);
    vm::gelu_of_bf16_values(mixed, y.data(), n);
    vm::gelu(mixed, want.data(), n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(y[i]), bits_of(want[i])) << n << " " << i;
    EXPECT_EQ(y[n], 42.0f) << "wrote past the end, n = " << n;
  }
}

TEST(vector_math, max_of_finds_what_the_running_max_finds_nan_passed_over) {
  // (the attention's softmax: its largest score, before the exponentials)
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x(70);
  for (std::size_t n = 0; n <= x.size(); ++n)
    for (int pattern = 0; pattern < 5; ++pattern) {
      for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(static_cast<float>(i * 7 + n + pattern)) * 30 - 20;
      if (pattern == 1)
        for (std::size_t i = 0; i < n; i += 3) x[i] = nan;
      if (pattern == 2)
        for (std::size_t i = 0; i < n; ++i) x[i] = nan;
      if (pattern == 3 && n > 0) x[n - 1] = inf;  // the largest in the tail
      if (pattern == 4 && n > 0) x[n / 2] = -inf;
      float expect = -inf;
      for (std::size_t i = 0; i < n; ++i) expect = std::max(expect, x[i]);
      EXPECT_EQ(vm::max_of(x.data(), n), expect) << n << " " << pattern;
      EXPECT_EQ(vm::max_of<vm::scalar_pack>(x.data(), n), expect) << n << " " << pattern;
    }
}

TEST(vector_math, limits_and_nan) {
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> x{inf, -inf, nan, 89.0f, -104.0f, 0.0f, -0.0f};
  std::vector<float> y(x.size());
  vm::exp(x.data(), y.data(), x.size());
  EXPECT_EQ(y[0], inf);
  EXPECT_EQ(y[1], 0);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[3], inf);
  EXPECT_EQ(y[4], 0);
  EXPECT_EQ(y[5], 1);
  vm::tanh(x.data(), y.data(), x.size());
  EXPECT_EQ(y[0], 1);
  EXPECT_EQ(y[1], -1);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_TRUE(std::signbit(y[6]));
  vm::sigmoid(x.data(), y.data(), x.size());
  EXPECT_EQ(y[0], 1);
  EXPECT_EQ(y[1], 0);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(y[5], 0.5f);
  vm::erf(x.data(), y.data(), x.size());
  EXPECT_EQ(y[0], 1);
  EXPECT_EQ(y[1], -1);
  EXPECT_TRUE(std::isnan(y[2]));
  vm::gelu(x.data(), y.data(), x.size());
  EXPECT_EQ(y[3], 89.0f);
  EXPECT_EQ(y[4], 0);
  EXPECT_TRUE(std::isnan(y[2]));
  // A NaN logit must reach the loss (the trainer stops on a NaN loss).
  EXPECT_TRUE(std::isnan(vm::exp_affine_sum(x.data() + 2, 1.0f, -1.0f, 1, nullptr)));
}

TEST(vector_math, every_length_gives_the_same_bits_in_every_position) {
  // Tails (masked loads) compute exactly what full packs compute.
  std::vector<float> x(53);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -3.0f + 0.37f * static_cast<float>(i);
  std::vector<float> all(x.size());
  vm::gelu(x.data(), all.data(), x.size());
  for (std::size_t n = 1; n <= x.size(); ++n) {
    for (std::size_t off : {std::size_t{0}, x.size() - n}) {
      std::vector<float> y(n + 1, 42.0f);
      vm::gelu(x.data() + off, y.data(), n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], all[off + i]) << n << " " << off << " " << i;
      EXPECT_EQ(y[n], 42.0f) << "wrote past the end, n = " << n;
    }
  }
}

#if KILN_DETAIL_FMA_DISPATCH
// In a build for the x86-64 baseline, each function runs the SSE2 pack with
// the FMA instruction where the CPU has it (sse2_fma_pack, compiled for
// FMA) and with fma emulated in double where not (sse2_pack): with_pack
// chooses.
TEST(vector_math, with_pack_takes_the_fused_pack_where_the_cpu_has_fma) {
  __builtin_cpu_init();
  const bool has_fma = __builtin_cpu_supports("fma") != 0;
  int fused = 0, emulated = 0, other = 0;
  const auto count = [&]<class Q>(Q) {
    if constexpr (std::is_same_v<Q, vm::sse2_fma_pack>) {
      ++fused;
    } else if constexpr (std::is_same_v<Q, vm::sse2_pack>) {
      ++emulated;
    } else {
      ++other;
    }
  };
  vm::with_pack<vm::native_pack>(count);
  EXPECT_EQ(fused, has_fma ? 1 : 0);
  EXPECT_EQ(emulated, has_fma ? 0 : 1);
  vm::with_pack<vm::sse2_pack>(count);  // a pack asked for by name runs as it is
  vm::with_pack<vm::scalar_pack>(count);
  EXPECT_EQ(emulated, has_fma ? 1 : 2);
  EXPECT_EQ(other, 1);
}

// The two must give the same bits. The sweeps above check the one this CPU
// runs against the scalar pack; on a CPU with FMA this checks the emulated
// one too, every function, tails of 1 to 3, exp_affine_sum stored or not.
TEST(vector_math, fused_and_emulated_sse2_packs_give_the_same_bits) {
  if (!kiln::detail::cpu_has_fma()) GTEST_SKIP() << "no FMA: both sides would be the emulated pack";
  std::vector<float> x = sweep(-12.0f, 12.0f, 4099);
  for (float v : {-100.0f, 100.0f, -0.0f, 0.0f, 1e-40f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    x.push_back(v);
  std::vector<float> dy(x.size()), z(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) dy[i] = 0.5f + 0.01f * static_cast<float>(i % 89);
  vm::gelu(x.data(), z.data(), x.size());  // (a stored gelu output for the two-array gelu′)
  using unary = void (*)(const float*, float*, std::size_t);
  using binary = void (*)(const float*, const float*, float*, std::size_t);
  struct one {
    const char* name;
    unary native, emulated;
  };
  struct two {
    const char* name;
    binary native, emulated;
  };
  const one unaries[] = {{"exp", vm::exp<>, vm::exp<vm::sse2_pack>},
                         {"tanh", vm::tanh<>, vm::tanh<vm::sse2_pack>},
                         {"sigmoid", vm::sigmoid<>, vm::sigmoid<vm::sse2_pack>},
                         {"erf", vm::erf<>, vm::erf<vm::sse2_pack>},
                         {"gelu", vm::gelu<>, vm::gelu<vm::sse2_pack>},
                         {"gelu_of_bf16_values", vm::gelu_of_bf16_values<>, vm::gelu_of_bf16_values<vm::sse2_pack>}};
  const two binaries[] = {
      {"gelu_backward", vm::gelu_backward<>, vm::gelu_backward<vm::sse2_pack>},
      {"tanh_backward", vm::tanh_backward<>, vm::tanh_backward<vm::sse2_pack>},
      {"gelu_backward_of_bf16_values", vm::gelu_backward_of_bf16_values<>,
       vm::gelu_backward_of_bf16_values<vm::sse2_pack>}};
  std::vector<float> a(x.size()), b(x.size());
  const auto compare = [&](const char* name, std::size_t n) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n; ++i) differ += bits_of(a[i]) != bits_of(b[i]);
    EXPECT_EQ(differ, 0u) << name << ": values where the fused and the emulated SSE2 pack disagree, of " << n;
  };
  for (std::size_t n : {x.size(), x.size() - 1, std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
    for (const one& f : unaries) {
      f.native(x.data(), a.data(), n);
      f.emulated(x.data(), b.data(), n);
      compare(f.name, n);
    }
    for (const two& f : binaries) {
      f.native(x.data(), dy.data(), a.data(), n);
      f.emulated(x.data(), dy.data(), b.data(), n);
      compare(f.name, n);
    }
    vm::gelu_backward<>(x.data(), z.data(), dy.data(), a.data(), n);
    vm::gelu_backward<vm::sse2_pack>(x.data(), z.data(), dy.data(), b.data(), n);
    compare("gelu_backward given the output", n);
    const float sum_a = vm::exp_affine_sum<>(x.data(), 0.5f, -1.0f, n, a.data());
    const float sum_b = vm::exp_affine_sum<vm::sse2_pack>(x.data(), 0.5f, -1.0f, n, b.data());
    compare("exp_affine_sum", n);
    EXPECT_EQ(bits_of(sum_a), bits_of(sum_b)) << "exp_affine_sum's sum, n = " << n;
    EXPECT_EQ(bits_of(vm::exp_affine_sum<>(x.data(), 0.5f, -1.0f, n, nullptr)),
              bits_of(vm::exp_affine_sum<vm::sse2_pack>(x.data(), 0.5f, -1.0f, n, nullptr)))
        << "exp_affine_sum's sum, not stored, n = " << n;
  }
}
#endif

TEST(vector_math, exp_affine_sum_adds_in_index_order_stored_or_not) {
  for (std::size_t n : {1u, 15u, 64u, 65u, 200u}) {
    std::vector<float> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = std::sin(static_cast<float>(i)) * 4;
    const float stored = vm::exp_affine_sum(x.data(), 0.25f, -1.0f, n, y.data());
    float expect = 0;
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(y[i], [&] {
        float e;
        const float arg = std::fma(x[i], 0.25f, -1.0f);
        vm::exp<vm::scalar_pack>(&arg, &e, 1);
        return e;
      }()) << i;
      expect += y[i];
    }
    EXPECT_EQ(stored, expect) << n;
    EXPECT_EQ(vm::exp_affine_sum(x.data(), 0.25f, -1.0f, n, nullptr), expect) << n;
  }
}

#if defined(__SSE2__) && !defined(__FMA__)
/// The SSE2 pack's fused multiply-add (computed in double, rounded to odd,
/// then to float) against std::fma, bit for bit: random operands over
/// every exponent the kernels reach and beyond, sums that cancel, products
/// whose exact sum with c sits at or next to a midpoint between floats
/// (where rounding twice, to double and then to float, would differ), and
/// the special values. In a build for the baseline on a CPU with FMA, the
/// fused pack's (the instruction) too.
TEST(vector_math, sse2_fma_is_std_fma_bit_for_bit) {
  std::vector<std::array<float, 3>> cases;
  std::uint64_t state = 12345;
  const auto next = [&state] {  // (xorshift: reproducible, no dependency)
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return state;
  };
  const auto any_float = [&] {  // every sign, exponent and mantissa, NaNs included
    return std::bit_cast<float>(static_cast<std::uint32_t>(next()));
  };
  const auto near_one = [&](int spread) {  // a mantissa of random bits, exponent in [−spread, spread]
    const auto r = next();
    const int e = static_cast<int>(r % static_cast<std::uint64_t>(2 * spread + 1)) - spread;
    const std::uint32_t bits = (static_cast<std::uint32_t>(e + 127) << 23) | static_cast<std::uint32_t>((r >> 20) & 0x7FFFFF);
    return (r >> 60) & 1 ? -std::bit_cast<float>(bits) : std::bit_cast<float>(bits);
  };
  for (int i = 0; i < 300000; ++i) {
    cases.push_back({any_float(), any_float(), any_float()});
    cases.push_back({near_one(30), near_one(30), near_one(60)});
    // c near −a·b: the sum cancels to the product's low bits
    const float a = near_one(10), b = near_one(10), c = -a * b;
    cases.push_back({a, b, std::bit_cast<float>(std::bit_cast<std::uint32_t>(c) + static_cast<std::uint32_t>(next() % 5) - 2)});
    // a·b at a float midpoint (for odd j), of either sign, c a tiny nudge
    // either way or none: double rounding's cases (nudges below 2⁻⁵² are
    // lost in rounding to double; larger ones are controls)
    const auto j = static_cast<float>(next() % 4096);
    const float sign = next() & 1 ? 1.0f : -1.0f, x = sign * (1.0f + j * 0x1p-12f), y = 1.0f + 0x1p-12f;
    const bool nudged = next() % 3 != 0;
    const float nudge_sign = next() & 1 ? 1.0f : -1.0f;
    const int nudge_exponent = -50 - static_cast<int>(next() % 40);
    cases.push_back({x, y, nudged ? nudge_sign * std::ldexp(1.0f, nudge_exponent) : 0.0f});
    // sums at midpoints between subnormal floats: c (a subnormal, either
    // sign) + (2j + 1)·2⁻¹⁵⁰, or + 2⁻¹⁵⁰·(1 − 2⁻⁴⁶), which rounds to such a
    // midpoint in double (the exact sum is just below it)
    const float c_sign = next() & 1 ? 1.0f : -1.0f;
    const float subnormal = c_sign * static_cast<float>(next() % (1u << 22)) * 0x1p-149f;
    const float odd = static_cast<float>(2 * (next() % 1000) + 1) * 0x1p-75f;
    cases.push_back({sign * odd, 0x1p-75f, subnormal});
    cases.push_back({sign * (1.0f + 0x1p-23f) * 0x1p-75f, (1.0f - 0x1p-23f) * 0x1p-75f, subnormal});
  }
  // the midpoint between the largest float and 2¹²⁸, (2²⁵ − 1)·2¹⁰³: 0 and
  // +2⁵⁰ give inf, −2⁵⁰ the largest float (and the same negated)
  for (const float s : {1.0f, -1.0f})
    for (const float c : {0.0f, 0x1p50f, -0x1p50f}) cases.push_back({s * 18631.0f * 0x1p51f, 1801.0f * 0x1p52f, s * c});
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, inf, -inf, nan, 0x1p-149f, -0x1p-149f, 0x1p-126f,
                            std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 0x1p64f, 0x1p-64f};
  for (float a : specials)
    for (float b : specials)
      for (float c : specials) cases.push_back({a, b, c});
  const auto check = [&]<class P>(P, const char* pack) {
    std::size_t differ = 0;
    for (std::size_t i = 0; i + 4 <= cases.size(); i += 4) {
      alignas(16) float a[4], b[4], c[4], got[4];
      for (int l = 0; l < 4; ++l) a[l] = cases[i + l][0], b[l] = cases[i + l][1], c[l] = cases[i + l][2];
      _mm_store_ps(got, P::fma(_mm_load_ps(a), _mm_load_ps(b), _mm_load_ps(c)));
      for (int l = 0; l < 4; ++l) {
        const float want = std::fma(a[l], b[l], c[l]);
        const bool same = std::isnan(want) ? std::isnan(got[l])
                                           : std::bit_cast<std::uint32_t>(got[l]) == std::bit_cast<std::uint32_t>(want);
        if (!same && ++differ <= 5)
          ADD_FAILURE() << pack << std::hexfloat << ": fma(" << a[l] << ", " << b[l] << ", " << c[l]
                        << ") = " << got[l] << ", std::fma " << want;
      }
    }
    EXPECT_EQ(differ, 0u) << pack << ", of " << cases.size();
  };
  check(vm::sse2_pack{}, "sse2_pack");
#if KILN_DETAIL_FMA_DISPATCH
  if (kiln::detail::cpu_has_fma()) check(vm::sse2_fma_pack{}, "sse2_fma_pack");
#endif
}
#endif

// The loss's exp fuses its multiply-adds in double: in a build for the
// x86-64 baseline on a CPU without FMA, exactly in double arithmetic
// (exact_fma; kiln_vecmath_baseline_tests runs this). Bit for bit std::fma
// on random triples (exponents over ±60), cancelling ones, sums near a
// midpoint of the product's ulp, and sums just off a midpoint of c's ulp
// (a·b = ±ulp(c)/2 · (1 − 2^−2k), k ≥ 27, so that a·b is not a double),
// which a second rounding to nearest gets wrong where c is odd. The
// two-lane exact_fma (exp_shifted_emulated's; the scalar one,
// first_lane_of<emulated_fma2>, is its first lane) takes each triple in its
// first lane and one of the other kind in its second (without the rounding to odd 2,100,839 of the 4.2 million pairs
// differ; with each lane's parity or sign taken from the other lane, some
// differ too; counts from a g++ build: clang may draw other triples, the
// order of a call's arguments being unspecified); on a CPU with FMA the
// instruction's two lanes too (instruction_fma2, exp_shifted's there, and
// its first lane); and exp_shifted_emulated gives exp's bits.
#if KILN_DETAIL_EXACT_FMA
TEST(libm_expf, its_double_fma_is_std_fma_bit_for_bit) {
  struct triples {  // (xorshift: reproducible, no dependency)
    std::uint64_t state;
    std::uint64_t next() { return state ^= state << 13, state ^= state >> 7, state ^= state << 17, state; }
    double unit() { return static_cast<double>(next() >> 11) * 0x1p-53 * 2 - 1; }  // [−1, 1)
    int exponent(int spread) { return static_cast<int>(next() % (2 * spread + 1)) - spread; }
    std::array<double, 3> random(int i) {
      const double a = std::ldexp(unit(), exponent(60)), b = std::ldexp(unit(), exponent(60)), p = a * b;
      const double cases[] = {std::ldexp(unit(), exponent(60)), -p + std::ldexp(unit(), exponent(60) - 60),
                              std::round(unit() * 8) / 2 * (std::nextafter(p, INFINITY) - p), -p};
      return {a, b, cases[i % 4]};
    }
    std::array<double, 3> near_midpoint() {
      const int k = 27 + static_cast<int>(next() % 9), e = exponent(200);
      const double sa = next() & 1 ? 1 : -1, sb = next() & 1 ? 1 : -1, sc = next() & 1 ? 1 : -1;
      const double c = sc * std::ldexp(1 + std::ldexp(static_cast<double>(next() % 64), -52), e);
      return {1 + sa * std::ldexp(1, -k), sb * std::ldexp(1 - sa * std::ldexp(1, -k), e - 53), c};
    }
  };
  triples first{777}, second{4242};  // the two-lane one's second lane takes the other kind of triple
  std::size_t differ = 0, count = 0;
  const bool has_fma = kiln::detail::cpu_has_fma();
  const auto check = [&](std::array<double, 3> t, std::array<double, 3> u) {
    ++count;
    const auto same = [](double x, double y) {
      return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
    };
    namespace le = kiln::detail::libm_expf;
    const double want = std::fma(t[0], t[1], t[2]), got = le::first_lane_of<le::emulated_fma2>{}(t[0], t[1], t[2]);
    alignas(16) double lanes[2];
    _mm_store_pd(lanes, kiln::detail::libm_expf::exact_fma(_mm_set_pd(u[0], t[0]), _mm_set_pd(u[1], t[1]),
                                                           _mm_set_pd(u[2], t[2])));
    const double want_u = std::fma(u[0], u[1], u[2]);
    if (has_fma) {  // the instruction's two lanes, as exp_shifted takes them on a CPU with FMA, and its first
      alignas(16) double fused[2];
      _mm_store_pd(fused, kiln::detail::libm_expf::instruction_fma2{}(_mm_set_pd(u[0], t[0]), _mm_set_pd(u[1], t[1]),
                                                                      _mm_set_pd(u[2], t[2])));
      const double first = le::first_lane_of<le::instruction_fma2>{}(t[0], t[1], t[2]);
      if ((!same(fused[0], want) || !same(fused[1], want_u) || !same(first, want)) && ++differ <= 5)
        ADD_FAILURE() << std::hexfloat << "instruction_fma2: " << fused[0] << ", " << fused[1] << " (first lane alone "
                      << first << "); std::fma " << want << ", " << want_u;
    }
    if ((!same(got, want) || !same(lanes[0], want) || !same(lanes[1], want_u)) && ++differ <= 5)
      ADD_FAILURE() << std::hexfloat << "fma(" << t[0] << ", " << t[1] << ", " << t[2] << ") = " << got << " and "
                    << lanes[0] << " (two lanes), std::fma " << want << "; second lane fma(" << u[0] << ", " << u[1]
                    << ", " << u[2] << ") = " << lanes[1] << ", std::fma " << want_u;
  };
  for (int i = 0; i < 2'000'000; ++i) check(first.random(i), second.near_midpoint());
  for (int i = 0; i < 2'200'000; ++i) check(first.near_midpoint(), second.random(i));
  EXPECT_EQ(differ, 0u) << "of " << count << " (each kind of triple in both lanes of the two-lane one)";
  // and exp computed with it, on every 171st float of [−110, 90] (all of them in a one-off run: no difference)
  using kiln::detail::libm_expf::exp_by;
  std::size_t exp_differ = 0;
  const std::vector<float> xs = sweep(-110, 90, 171);
  for (float x : xs)
    exp_differ += std::bit_cast<std::uint32_t>(exp_by(
                      x, kiln::detail::libm_expf::first_lane_of<kiln::detail::libm_expf::emulated_fma2>{})) !=
                  std::bit_cast<std::uint32_t>(exp_by(x, kiln::detail::libm_expf::library_fma{}));
  EXPECT_EQ(exp_differ, 0u) << "of " << xs.size();
  // and exp_shifted's loop with it (4 at a time, then a tail of 0 to 3), shifted and scaled
  std::size_t loop_differ = 0, loop_count = 0;
  std::vector<float> y(xs.size());
  for (std::size_t n : {xs.size() / 4 * 4, xs.size() / 8 * 4 + 1, xs.size() / 8 * 4 + 3}) {  // (tails mid-range)
    loop_count += n;
    kiln::detail::libm_expf::exp_shifted_emulated(xs.data(), 0.5f, 0.25f, 3.0f, y.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const float want = exp_by((xs[i] - 0.5f) - 0.25f, kiln::detail::libm_expf::library_fma{}) * 3.0f;
      loop_differ += std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(want);
    }
  }
  EXPECT_EQ(loop_differ, 0u) << "of " << loop_count << " (exp_shifted_emulated)";
}
#endif

// The vector loops and exp() give the scalar definition's bits (its
// multiply-adds std::fma), on every CPU; and std::exp's where glibc takes
// its FMA build of expf, on a CPU with FMA and AVX2 (elsewhere its unfused
// build may differ in rare last places; kiln keeps the FMA build's bits).
bool glibc_takes_its_fma_expf() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

TEST(libm_expf, has_the_bits_of_std_exp) {
  // Every 17th float of [−110, 90] (all of them in a one-off run: 2.24e9, no difference).
  const std::vector<float> xs = sweep(-110, 90, 17);
  std::vector<float> y(xs.size());
  kiln::detail::libm_expf::exp_shifted(xs.data(), 0.0f, 0.0f, 1.0f, y.data(), xs.size());
  const bool glibc_fused = glibc_takes_its_fma_expf();
  std::size_t differ = 0, from_std = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const float want = kiln::detail::libm_expf::exp_by(xs[i], kiln::detail::libm_expf::library_fma{});
    differ += std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(want);
    differ += std::bit_cast<std::uint32_t>(kiln::detail::libm_expf::exp(xs[i])) != std::bit_cast<std::uint32_t>(want);
    if (glibc_fused) from_std += std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(std::exp(xs[i]));
  }
  EXPECT_EQ(differ, 0u) << "of " << xs.size();
  EXPECT_EQ(from_std, 0u) << "of " << xs.size() << " (glibc's FMA build of expf)";
}

TEST(libm_expf, special_values_shift_and_scale) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  // (±1e30 break the shift trick without the special path; the specials sit
  // in mixed packs of 4 and 8 and in the tails, beside ordinary values)
  const std::vector<float> x{inf, -inf, std::numeric_limits<float>::quiet_NaN(), 88.8f, -104, -103.5f, 88.5f, -1, 2, 0,
                             -1, 1e30f, 2, -1e30f, 0, 1e30f, -inf, 1, std::numeric_limits<float>::quiet_NaN(), inf};
  const auto check = [&](auto exp_shifted, const char* name, std::size_t n) {  // (n: tails of 0, 1 and 3)
    std::vector<float> y(n), in_place(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n));
    exp_shifted(x.data(), 0.5f, 0.25f, 3.0f, y.data(), n);
    // (y may be x: the special values' lanes are not read back from x after the store)
    exp_shifted(in_place.data(), 0.5f, 0.25f, 3.0f, in_place.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      // (the scalar definition; std::exp's bits where glibc takes its FMA build, as above)
      using kiln::detail::libm_expf::library_fma;
      const float want = kiln::detail::libm_expf::exp_by((x[i] - 0.5f) - 0.25f, library_fma{}) * 3.0f;
      if (glibc_takes_its_fma_expf() && !std::isnan(want)) {
        EXPECT_EQ(want, std::exp((x[i] - 0.5f) - 0.25f) * 3.0f) << x[i];
      }
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[i])) << name << ' ' << x[i];
        EXPECT_TRUE(std::isnan(in_place[i])) << name << ' ' << x[i];
      } else {
        EXPECT_EQ(y[i], want) << name << ' ' << x[i];
        EXPECT_EQ(in_place[i], want) << name << ' ' << x[i] << " in place";
      }
    }
  };
  for (std::size_t n : {x.size(), x.size() - 1, x.size() - 3}) {
    check(kiln::detail::libm_expf::exp_shifted, "exp_shifted", n);
#if KILN_DETAIL_EXACT_FMA
    check(kiln::detail::libm_expf::exp_shifted_emulated, "exp_shifted_emulated", n);
#endif
  }
  float sum = 0;  // in index order, as the loss sums
  for (std::size_t i = 4; i < 10; ++i) sum += kiln::detail::libm_expf::exp(x[i] - 0.5f);
  EXPECT_EQ(kiln::detail::libm_expf::sum_exp_shifted(x.data() + 4, 0.5f, 6), sum);
  EXPECT_TRUE(std::isnan(kiln::detail::libm_expf::sum_exp_shifted(x.data(), 0.5f, x.size())));
}
}  // namespace
