// precision<bf16>: the conversion, the bf16 GEMM (AVX512-BF16 where the
// target has it, rounding + f32 elsewhere) against references, a training run
// that must track its f32 twin, and checkpoints that cross precisions.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "support/blobs.hpp"

namespace {
using namespace kiln;

std::uint16_t bits_of(float f) { return bf16::from(f).bits; }

TEST(bf16, rounds_to_nearest_even_and_keeps_nan) {
  EXPECT_EQ(bits_of(1.0f), 0x3F80);
  EXPECT_EQ(bits_of(-2.0f), 0xC000);
  EXPECT_EQ(static_cast<float>(bf16::from(1.0f)), 1.0f);
  const float ulp = 0x1.0p-7f;                                        // bf16's spacing at 1
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2), 1.0f);                     // tie: to the even neighbour (1)
  EXPECT_EQ(round_to_bf16(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);       // tie: to the even neighbour (1 + 2 ulp)
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2 + 0x1.0p-20f), 1.0f + ulp);  // above the tie: up
  EXPECT_EQ(round_to_bf16(1.0f + ulp / 2 - 0x1.0p-20f), 1.0f);        // below: down
  EXPECT_EQ(bits_of(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bits_of(-0.0f), 0x8000);
  EXPECT_EQ(bits_of(std::numeric_limits<float>::max()), 0x7F80);  // overflows to infinity, as IEEE rounding does
  // A NaN whose payload is only in the low 16 bits would round into an infinity; it must stay a NaN.
  const float low_payload_nan = std::bit_cast<float>(0x7F800001u);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16::from(low_payload_nan))));
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16::from(-std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bits_of(-std::numeric_limits<float>::quiet_NaN()) & 0x8000, 0x8000);  // sign kept
}

TEST(bf16, array_rounding_matches_the_scalar_rounding_at_every_position) {
  // detail::narrow rounds whole arrays (the weights' copy, layer outputs):
  // 16 at a time where the target has AVX512-BF16, tail included, so every
  // position gives the same bits. The hardware flushes subnormals to zero;
  // the scalar conversion keeps them (docs/precision.md).
  std::vector<float> in = {1.0f + 0x1.0p-8f, -3.3f, 65504.0f, std::numeric_limits<float>::quiet_NaN(), 1e-39f, 0.0f,
                           -0.0f};
  std::vector<float> all;
  for (int copy = 0; copy < 7; ++copy) all.insert(all.end(), in.begin(), in.end());  // 49 values: blocks and a tail
  std::vector<bf16> out(all.size());
  detail::narrow(all.data(), all.size(), out.data());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::size_t k = i % in.size();
    EXPECT_EQ(out[i].bits, out[k].bits) << "position " << i;
    if (std::isnan(all[i])) {
      EXPECT_TRUE(std::isnan(static_cast<float>(out[i])));
    } else if (all[i] != 1e-39f) {
      EXPECT_EQ(out[i].bits, bf16::from(all[i]).bits) << all[i];
    } else {
#if defined(__AVX512BF16__)
      EXPECT_EQ(out[i].bits, 0);
#else
      EXPECT_EQ(out[i].bits, bf16::from(all[i]).bits);
#endif
    }
  }
}

TEST(bf16, rounding_with_a_bias_matches_the_scalar_rounding_in_whole_vectors_and_tails) {
  // narrow with one bias (conv2d's outputs) and narrow_columns with a bias
  // per row (dense's outputs): whole vectors and a tail of each length
  // (rows 1…37: up to 2 whole vectors of 16, 4 of 8), nothing written
  // outside the output (a guard value on each side).
  const float bias_of_all = 0.375f;
  const bf16 guard{0x1234};
  for (std::size_t rows = 1; rows <= 37; ++rows) {
    const std::size_t cols = 3, n = rows * cols;
    std::vector<float> in(n), bias(rows);
    for (std::size_t i = 0; i < n; ++i) in[i] = 1.0f + static_cast<float>(i) * 0x1.0p-9f - 0.7f * (i % 3);
    for (std::size_t i = 0; i < rows; ++i) bias[i] = 0x1.0p-10f * static_cast<float>(i) - 0.5f;
    std::vector<bf16> one(n + 2, guard), per_row(n + 2, guard);
    detail::narrow(in.data(), n, one.data() + 1, bias_of_all);
    detail::narrow_columns(in.data(), rows, cols, bias.data(), per_row.data() + 1);
    for (const std::vector<bf16>* out : {&one, &per_row}) {
      EXPECT_EQ(out->front().bits, guard.bits) << rows << " rows";
      EXPECT_EQ(out->back().bits, guard.bits) << rows << " rows";
    }
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(one[i + 1].bits, bf16::from(in[i] + bias_of_all).bits) << rows << " rows, position " << i;
      EXPECT_EQ(per_row[i + 1].bits, bf16::from(in[i] + bias[i % rows]).bits) << rows << " rows, position " << i;
    }
  }
}

TEST(bf16, rounding_in_place_of_f32_gives_bf16_from_at_every_position) {
  // detail::round_values (the small products' rounded copies) keeps each
  // value as an f32: bit for bit bf16::from widened, subnormals kept, 16 or
  // 8 lanes at a time and a tail.
  const std::vector<float> in = {1.0f + 0x1.0p-8f, 1.0f + 0x1.8p-8f, -3.3f, 65504.0f, 3.4e38f, -0.0f,
                                 std::numeric_limits<float>::quiet_NaN(), 1e-39f, 0x1.0p-130f};
  std::vector<float> all;
  for (int copy = 0; copy < 5; ++copy) all.insert(all.end(), in.begin(), in.end());  // 45 values
  std::vector<float> out(all.size(), 7.0f);
  detail::round_values(all.data(), all.size(), out.data());
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (std::isnan(all[i])) {
      EXPECT_TRUE(std::isnan(out[i])) << "position " << i;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(round_to_bf16(all[i])))
          << all[i] << " at position " << i;
    }
  }
}

/// C = op(A)·op(B) in bf16 mode against (1) a double reference of the
/// bf16-rounded operands, which it must match to f32 accumulation error, and
/// (2) the exact f32 operands, within the error bf16's 8-bit significand
/// allows: each product's factors are off by at most 2⁻⁸ relative (half the
/// spacing 2⁻⁷ of 8 significant bits), so |error| ≤ (2·2⁻⁸ + 2⁻¹⁶)·Σ|a·b|.
/// SA and SB are the operands' storage: float (rounded as they are packed)
/// or bf16 (as a bf16 program keeps its activations and its step's weights).
template <bool TransA, bool TransB, class SA = float, class SB = float>
void check_bf16_gemm(detail::index m, detail::index n, detail::index k, std::uint64_t seed) {
  using detail::index;
  rng g(seed);
  const index lda = TransA ? k : m, ldb = TransB ? n : k;
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n)),
      c(static_cast<std::size_t>(m * n));
  for (auto& v : a) v = static_cast<float>(g.uniform(-2, 2));
  for (auto& v : b) v = static_cast<float>(g.uniform(-2, 2));
  auto stored = [](const std::vector<float>& x, auto as) {
    using S = decltype(as);
    std::vector<S> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      if constexpr (std::is_same_v<S, bf16>) {
        out[i] = bf16::from(x[i]);
      } else {
        out[i] = x[i];
      }
    }
    return out;
  };
  const std::vector<SA> sa = stored(a, SA{});
  const std::vector<SB> sb = stored(b, SB{});
  detail::gemm_scratch<float> s;
  s.use_bf16_operands(true);
  s.reserve(m, n, k);
  std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());  // overwritten, never read
  s.run<TransA, TransB>(m, n, k, sa.data(), lda, sb.data(), ldb, c.data(), m, false);
  for (index j = 0; j < n; ++j)
    for (index i = 0; i < m; ++i) {
      double rounded = 0, exact = 0, magnitude = 0;
      for (index p = 0; p < k; ++p) {
        const float x = TransA ? a[static_cast<std::size_t>(p + i * lda)] : a[static_cast<std::size_t>(i + p * lda)];
        const float y = TransB ? b[static_cast<std::size_t>(j + p * ldb)] : b[static_cast<std::size_t>(p + j * ldb)];
        rounded += static_cast<double>(round_to_bf16(x)) * round_to_bf16(y);
        exact += static_cast<double>(x) * y;
        magnitude += std::abs(static_cast<double>(x) * y);
      }
      const double got = c[static_cast<std::size_t>(i + j * m)];
      ASSERT_NEAR(got, rounded, 1e-6 * magnitude + 1e-6) << m << "×" << n << "×" << k << " at " << i << ", " << j;
      ASSERT_NEAR(got, exact, (2 * 0x1.0p-8 + 0x1.0p-16) * magnitude + 1e-6);
    }
}

TEST(bf16, gemm_matches_references_on_every_edge_of_the_blocking) {
  std::uint64_t seed = 1;
  for (detail::index m : {1, 15, 16, 17, 33, 100})
    for (detail::index n : {1, 7, 8, 9, 64})
      for (detail::index k : {1, 2, 3, 16, 17, 33, 385}) {
        check_bf16_gemm<false, false>(m, n, k, ++seed);
        check_bf16_gemm<true, false>(m, n, k, ++seed);
        check_bf16_gemm<false, true>(m, n, k, ++seed);
        check_bf16_gemm<true, true>(m, n, k, ++seed);
      }
}

TEST(bf16, gemm_takes_operands_stored_in_bf16) {
  // A bf16 program hands the GEMM its activations and its step's weights in
  // bf16: one or both operands, every transposition, every edge.
  std::uint64_t seed = 1000;
  for (detail::index m : {1, 15, 17, 33, 100})
    for (detail::index n : {1, 7, 9, 64})
      for (detail::index k : {1, 2, 3, 17, 33, 385}) {
        check_bf16_gemm<false, false, bf16, float>(m, n, k, ++seed);
        check_bf16_gemm<true, false, bf16, bf16>(m, n, k, ++seed);
        check_bf16_gemm<false, true, float, bf16>(m, n, k, ++seed);
        check_bf16_gemm<true, true, bf16, float>(m, n, k, ++seed);
        check_bf16_gemm<false, false, float, bf16>(m, n, k, ++seed);
        check_bf16_gemm<true, false, float, bf16>(m, n, k, ++seed);
        check_bf16_gemm<false, true, bf16, bf16>(m, n, k, ++seed);
        check_bf16_gemm<true, true, bf16, bf16>(m, n, k, ++seed);
      }
}

// Without AVX512-BF16 a bf16 product is the f32 product of the operands'
// bf16 values: made while packing on AVX-512 targets (widened from bf16,
// rounded from f32), from rounded copies elsewhere. Either way it must give
// the bits of the f32 kernel run on copies rounded by kiln::bf16::from, so
// that a bf16 program trains to the same bits on every CPU without
// AVX512-BF16. (With it, vdpbf16ps sums pairs: another order.)
template <bool TransA, bool TransB, class SA, class SB>
void expect_the_product_of_rounded_copies(detail::index m, detail::index n, detail::index k, std::uint64_t seed) {
  using detail::index;
  rng g(seed);
  const index lda = TransA ? k : m, ldb = TransB ? n : k;
  std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
  for (auto& v : a) v = static_cast<float>(g.uniform(-3, 3));
  for (auto& v : b) v = static_cast<float>(g.uniform(-3, 3));
  a[0] = 0x1.0p-130f;                        // a subnormal: kept, not flushed
  b.back() = 1.0f + 0x1.0p-8f;               // a tie: to even
  std::vector<SA> sa(a.size());
  std::vector<SB> sb(b.size());
  for (std::size_t i = 0; i < a.size(); ++i) sa[i] = detail::stored_as<SA>(a[i]);
  for (std::size_t i = 0; i < b.size(); ++i) sb[i] = detail::stored_as<SB>(b[i]);
  std::vector<float> ra(static_cast<std::size_t>(m * k)), rb(static_cast<std::size_t>(k * n));
  for (index p = 0; p < k; ++p)
    for (index i = 0; i < m; ++i)
      ra[static_cast<std::size_t>(i + p * m)] =
          round_to_bf16(TransA ? a[static_cast<std::size_t>(p + i * lda)] : a[static_cast<std::size_t>(i + p * lda)]);
  for (index j = 0; j < n; ++j)
    for (index p = 0; p < k; ++p)
      rb[static_cast<std::size_t>(p + j * k)] =
          round_to_bf16(TransB ? b[static_cast<std::size_t>(j + p * ldb)] : b[static_cast<std::size_t>(p + j * ldb)]);
  detail::gemm_scratch<float> s, plain;
  s.use_bf16_operands(true);
  s.reserve(m, n, k);
  plain.reserve(m, n, k);
  std::vector<float> got(static_cast<std::size_t>(m * n), 0.5f), want = got;
  s.run<TransA, TransB>(m, n, k, sa.data(), lda, sb.data(), ldb, got.data(), m, true);
  plain.f32_run<false, false>(m, n, k, ra.data(), m, rb.data(), k, want.data(), m);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
      << m << "×" << n << "×" << k << (TransA ? " Aᵀ" : " A") << (TransB ? " Bᵀ" : " B");
}

TEST(bf16, without_avx512_bf16_a_product_is_that_of_rounded_copies_bit_for_bit) {
  if constexpr (detail::gemm_scratch<float>::native_bf16) {
    GTEST_SKIP() << "this target has AVX512-BF16: its products sum pairs (kiln_no_bf16_instruction_tests covers the rest)";
  }
  std::uint64_t seed = 5000;
  for (detail::index m : {1, 17, 33, 256})
    for (detail::index n : {1, 9, 64})
      for (detail::index k : {1, 17, 385, 784}) {
        expect_the_product_of_rounded_copies<false, false, bf16, float>(m, n, k, ++seed);
        expect_the_product_of_rounded_copies<true, false, bf16, bf16>(m, n, k, ++seed);
        expect_the_product_of_rounded_copies<false, true, float, bf16>(m, n, k, ++seed);
        expect_the_product_of_rounded_copies<true, true, float, float>(m, n, k, ++seed);
      }
}

// Without AVX512-BF16, a bf16 program's conv2d unfolds its input in f32
// (the bf16 values widened) and its products read that in place; with it,
// in bf16. Either way its output must be, bit for bit, an f32 program's on
// the same values (input and weights rounded to bf16 first, the bias
// kept), rounded to bf16: the products sum exact products in kiln's order.
// (Depths under one block, 384: the f32 program adds the bias first, the
// bf16 one last, the same sum only when there is one block of depth.)
TEST(bf16, without_avx512_bf16_conv2d_is_f32_conv2d_on_the_bf16_values_bit_for_bit) {
  if constexpr (detail::gemm_scratch<float>::native_bf16) {
    GTEST_SKIP() << "this target has AVX512-BF16: its products sum pairs (kiln_no_bf16_instruction_tests covers the rest)";
  }
  // 32 filters (a product that skips packing with AVX-512), 5 (narrow with
  // AVX2 too), a strided and padded one
  using wide = model<input<3, 9, 9>, conv2d<32, 3, 1, same>, flatten>;
  using narrow = model<input<4, 11, 7>, conv2d<5, 3, 1, same>, flatten>;
  using strided = model<input<2, 10, 10>, conv2d<6, 3, 2, 1>, flatten>;
  using skipping = model<input<3, 8, 8>, conv2d<4, 1, 2>, flatten>;  // (C·H·W > C·K·K·P: the larger workspace)
  const auto check = [](auto p16, auto p32) {
    rng g(77);
    for (float& v : p16.parameters()) v = static_cast<float>(g.uniform(-1, 1));
    std::copy(p16.parameters().begin(), p16.parameters().end(), p32.parameters().begin());
    const auto w = p32.template layer_parameter<1, 0>();
    detail::round_values(w.data(), w.size(), w.data());  // (the bias stays f32, as bf16 programs add it)
    for (float& v : p16.input()) v = static_cast<float>(g.uniform(-2, 2));
    detail::round_values(p16.input().data(), p16.input().size(), p32.input().data());
    p16.forward();
    p32.forward();
    ASSERT_EQ(p16.output().size(), p32.output().size());
    for (std::size_t i = 0; i < p16.output().size(); ++i)
      ASSERT_EQ(std::bit_cast<std::uint32_t>(p16.output()[i]), std::bit_cast<std::uint32_t>(round_to_bf16(p32.output()[i])))
          << "output " << i;
  };
  check(compile<wide, batch<3>, precision<bf16>>(1), compile<wide, batch<3>>(1));
  check(compile<narrow, batch<2>, precision<bf16>>(1), compile<narrow, batch<2>>(1));
  check(compile<strided, batch<2>, precision<bf16>>(1), compile<strided, batch<2>>(1));
  check(compile<skipping, batch<2>, precision<bf16>>(1), compile<skipping, batch<2>>(1));
}

// An f32 operand already rounded to bf16 values may be handed to a bf16
// product as such (detail::f32_of_bf16_values: attention rounds q, k, v,
// dO and dS once where it makes them). The product must be the one it
// makes of the same floats given plainly, bit for bit: on targets that
// round a small product's operands into copies it multiplies the operand
// where it is instead, everywhere else it reads it as the f32 it is.
template <bool TransA, bool TransB, bool RoundedA, bool RoundedB>
void expect_rounded_operands_multiplied_as_given(detail::index m, detail::index n, detail::index k,
                                                 std::uint64_t seed) {
  using detail::index;
  rng g(seed);
  const index lda = (TransA ? k : m) + 3, ldb = (TransB ? n : k) + 2;  // (padded: leading dimensions kept)
  std::vector<float> a(static_cast<std::size_t>(lda * (TransA ? m : k))), b(static_cast<std::size_t>(ldb * (TransB ? k : n)));
  for (auto& v : a) v = static_cast<float>(g.uniform(-3, 3));
  for (auto& v : b) v = static_cast<float>(g.uniform(-3, 3));
  if (RoundedA) detail::round_values(a.data(), a.size(), a.data());
  if (RoundedB) detail::round_values(b.data(), b.size(), b.data());
  detail::gemm_scratch<float> s;
  s.use_bf16_operands(true);
  s.reserve(m, n, k);
  std::vector<float> got(static_cast<std::size_t>(m * n), 0.5f), want = got;
  s.run<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, want.data(), m, true);
  const auto operand = [](const std::vector<float>& x, auto rounded) {
    if constexpr (decltype(rounded)::value) {
      return detail::as_rounded_operand(x.data());
    } else {
      return x.data();
    }
  };
  s.run<TransA, TransB>(m, n, k, operand(a, std::bool_constant<RoundedA>{}), lda, operand(b, std::bool_constant<RoundedB>{}),
                        ldb, got.data(), m, true);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
      << m << "×" << n << "×" << k << (TransA ? " Aᵀ" : " A") << (TransB ? " Bᵀ" : " B");
  std::fill(got.begin(), got.end(), std::numeric_limits<float>::quiet_NaN());  // overwritten, never read
  std::fill(want.begin(), want.end(), 0.25f);
  s.run<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, want.data(), m, false);
  s.run<TransA, TransB>(m, n, k, operand(a, std::bool_constant<RoundedA>{}), lda, operand(b, std::bool_constant<RoundedB>{}),
                        ldb, got.data(), m, false);
  ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float))) << "overwriting";
}

TEST(bf16, an_operand_rounded_by_its_caller_is_multiplied_as_the_same_floats) {
  std::uint64_t seed = 7000;
  // (attention's per-head shapes, small routes, and blocked ones)
  for (auto [m, n, k] : {std::array<detail::index, 3>{32, 32, 16}, {64, 32, 16}, {16, 32, 32}, {16, 32, 64},
                         {1, 9, 17}, {17, 1, 33}, {33, 64, 385}, {256, 64, 784}}) {
    expect_rounded_operands_multiplied_as_given<true, false, true, true>(m, n, k, ++seed);
    expect_rounded_operands_multiplied_as_given<false, false, true, false>(m, n, k, ++seed);
    expect_rounded_operands_multiplied_as_given<false, true, true, false>(m, n, k, ++seed);
    expect_rounded_operands_multiplied_as_given<false, true, false, true>(m, n, k, ++seed);
    expect_rounded_operands_multiplied_as_given<true, true, false, true>(m, n, k, ++seed);
  }
}

template <class... P>
detail::parameter_layout<P...> layout_for(param_list<P...>);

/// layer_norm bound to In (last extent D), run on bf16 activations and on
/// their widened values in f32. A row it widens is computed as an f32 row
/// is: the gradients have the same bits and the output is the f32 output
/// rounded as detail::narrow rounds it. A row too long to widen on the
/// stack is read in place: the same values, but the compiler may contract
/// its sums differently, so there the results agree to 1e-5 relative (and
/// the output to one bf16 ulp).
template <class In, bool SameBits>
void expect_layer_norm_on_bf16_rows_as_on_f32_rows() {
  using bound = layer_norm::bind<In, 1>;
  using layout = decltype(layout_for(typename bound::parameters{}));
  constexpr std::size_t B = 2, n = In::size * B;
  rng g(11);
  std::vector<float> w(layout::buffer_size), dw_f32(layout::buffer_size, 0.0f), dw_bf16(dw_f32);
  for (auto& v : w) v = static_cast<float>(g.uniform(-2, 2));
  std::vector<bf16> xb(n), yb(n), want(n);
  std::vector<float> xf(n), yf(n), dy(n), dx_f32(n), dx_bf16(n);
  for (std::size_t i = 0; i < n; ++i) {
    xb[i] = bf16::from(static_cast<float>(g.uniform(-3, 3) + (i % 7 == 0 ? 40.0 : 0.0)));
    xf[i] = static_cast<float>(xb[i]);
    dy[i] = static_cast<float>(g.uniform(-1, 1));
  }
  detail::layer_context<float, B, layout> f;
  f.x = xf.data(), f.y = yf.data(), f.dy = dy.data(), f.dx = dx_f32.data(), f.w = w.data(), f.dw = dw_f32.data();
  detail::layer_context<float, B, layout, detail::parameter_layout<>, bf16> h;
  h.x = xb.data(), h.y = yb.data(), h.dy = dy.data(), h.dx = dx_bf16.data(), h.w = w.data(), h.dw = dw_bf16.data();
  bound::forward(f), bound::backward(f);
  bound::forward(h), bound::backward(h);
  detail::narrow(yf.data(), n, want.data());
  const auto same = [](float a, float b) {
    if constexpr (SameBits) {
      return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
    } else {
      return std::abs(a - b) <= 1e-5f * (1.0f + std::abs(b));
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (SameBits) {
      ASSERT_EQ(yb[i].bits, want[i].bits) << "output " << i;
    } else {
      const float a = static_cast<float>(yb[i]), b = static_cast<float>(want[i]);
      ASSERT_LE(std::abs(a - b), 0x1.0p-7f * std::abs(b)) << "output " << i;
    }
    ASSERT_TRUE(same(dx_bf16[i], dx_f32[i])) << "dx " << i << ": " << dx_bf16[i] << " against " << dx_f32[i];
  }
  for (std::size_t i = 0; i < w.size(); ++i)
    ASSERT_TRUE(same(dw_bf16[i], dw_f32[i])) << "gradient " << i << ": " << dw_bf16[i] << " against " << dw_f32[i];
}

TEST(bf16, layer_norm_computes_a_bf16_row_as_it_computes_an_f32_row) {
  expect_layer_norm_on_bf16_rows_as_on_f32_rows<shape<3, 40>, true>();
  expect_layer_norm_on_bf16_rows_as_on_f32_rows<shape<5, 64>, true>();
  expect_layer_norm_on_bf16_rows_as_on_f32_rows<shape<2048>, true>();  // (the longest row widened)
  expect_layer_norm_on_bf16_rows_as_on_f32_rows<shape<2100>, false>();
}

/// conv2d bound to In, run forward and backward on bf16 activations (its
/// f32 weights rounded by the products) and, in f32, on the same values
/// (input, weights and output gradient rounded to bf16 first): its output
/// must be the f32 output rounded, and its gradients the f32 gradients, bit
/// for bit. Without AVX512-BF16; Unfolds says whether this shape's products
/// skip packing there, so that the bf16 layer unfolds each sample in f32.
/// (Depths under one block, 384: the f32 layer adds the bias first, the
/// bf16 one last, the same sum only with one block of depth.)
template <class Conv, class In, std::size_t B, bool Unfolds>
void expect_conv2d_on_bf16_values_as_in_f32() {
  using bound = typename Conv::template bind<In, 1>;
  using layout = decltype(layout_for(typename bound::parameters{}));
  static_assert(bound::CKK <= 384, "one block of depth (see above)");
  // the path under test is the one taken: the products would round the unfolded input into copies
  // (on targets that pack bf16 values: elsewhere the layer unfolds in bf16 whatever the shape)
  static_assert(!detail::gemm_scratch<float>::packs_bf16_values ||
                    detail::gemm_scratch<float>::rounds_into_copies_by_shape(bound::P, bound::F, bound::CKK) == Unfolds,
                "this shape's products do not route as the test's Unfolds says");
  constexpr std::size_t n_in = In::size * B, n_out = bound::output_shape::size * B;
  rng g(B * 31 + In::size);
  std::vector<float> w(layout::buffer_size), rounded_w(w), dw_f32(w.size(), 0.0f), dw_bf16(dw_f32);
  for (auto& v : w) v = static_cast<float>(g.uniform(-1, 1));
  rounded_w = w;
  const auto weight = layout::template offset<typename bound::weight_tag>;
  detail::round_values(rounded_w.data() + weight, bound::F * bound::CKK, rounded_w.data() + weight);  // (not the bias)
  std::vector<bf16> xb(n_in), yb(n_out);
  std::vector<float> xf(n_in), yf(n_out), dy(n_out), dx_f32(n_in), dx_bf16(n_in), wide(n_out);
  for (std::size_t i = 0; i < n_in; ++i) {
    xb[i] = bf16::from(static_cast<float>(g.uniform(-2, 2)));
    xf[i] = static_cast<float>(xb[i]);
  }
  for (auto& v : dy) v = round_to_bf16(static_cast<float>(g.uniform(-1, 1)));  // (products round it)
  detail::gemm_scratch<float> plain, rounding;
  rounding.use_bf16_operands(true);
  bound::template reserve<B, float>(plain);
  bound::template reserve<B, float>(rounding);
  // each layer's workspace, followed by a guard that must stay untouched (the room a widened sample needs)
  constexpr std::size_t guard = 64;
  std::vector<float> scratch_f32(bound::template workspace<B, float> + guard, -7.0f),
      scratch_bf16(bound::template workspace<B, bf16> + guard, -7.0f);
  detail::layer_context<float, B, layout> f;
  f.x = xf.data(), f.y = yf.data(), f.dy = dy.data(), f.dx = dx_f32.data(), f.w = rounded_w.data();
  f.dw = dw_f32.data(), f.gemm = &plain, f.scratch = scratch_f32.data();
  detail::layer_context<float, B, layout, detail::parameter_layout<>, bf16> h;
  h.x = xb.data(), h.y = yb.data(), h.dy = dy.data(), h.dx = dx_bf16.data(), h.w = w.data();
  h.dw = dw_bf16.data(), h.gemm = &rounding, h.scratch = scratch_bf16.data(), h.wide = wide.data();
  f.overwrite_gradients = h.overwrite_gradients = true;
  bound::forward(f), bound::backward(f);
  bound::forward(h), bound::backward(h);
  for (std::size_t i = 0; i < guard; ++i) {
    ASSERT_EQ(scratch_f32[scratch_f32.size() - guard + i], -7.0f) << "written past the f32 workspace";
    ASSERT_EQ(scratch_bf16[scratch_bf16.size() - guard + i], -7.0f) << "written past the bf16 workspace";
  }
  for (std::size_t i = 0; i < n_out; ++i)
    ASSERT_EQ(yb[i].bits, bf16::from(yf[i]).bits) << "output " << i;
  for (std::size_t i = 0; i < n_in; ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(dx_bf16[i]), std::bit_cast<std::uint32_t>(dx_f32[i])) << "dx " << i;
  for (std::size_t i = 0; i < w.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(dw_bf16[i]), std::bit_cast<std::uint32_t>(dw_f32[i])) << "gradient " << i;
}

// The same as above for the layer's backward too, and for a shape whose
// stride skips input (C·H·W larger than the unfolded input: the widened
// sample needs the larger room).
TEST(bf16, without_avx512_bf16_conv2d_forward_and_backward_are_f32_on_the_bf16_values_bit_for_bit) {
  if constexpr (detail::gemm_scratch<float>::native_bf16) {
    GTEST_SKIP() << "this target has AVX512-BF16: its products sum pairs (kiln_no_bf16_instruction_tests covers the rest)";
  }
  expect_conv2d_on_bf16_values_as_in_f32<conv2d<32, 3, 1, same>, shape<3, 9, 9>, 3, true>();
  expect_conv2d_on_bf16_values_as_in_f32<conv2d<5, 3, 1, same>, shape<4, 11, 7>, 2, true>();
  expect_conv2d_on_bf16_values_as_in_f32<conv2d<6, 3, 2, 1>, shape<2, 10, 10>, 2, true>();
  expect_conv2d_on_bf16_values_as_in_f32<conv2d<4, 1, 2>, shape<3, 8, 8>, 2, true>();  // 3·8·8 > 3·16
  // 24 filters, 180 deep: only the narrow rule (Ops::narrow_rows, 32) skips packing (with AVX2, since the
  // twenty-third session)
  expect_conv2d_on_bf16_values_as_in_f32<conv2d<24, 3, 1, same>, shape<20, 12, 12>, 2, true>();
  // its forward product packs by the shape rules (64 filters, 144 deep, 81 or 36 pixels): unfolded in bf16;
  // with AVX-512 it takes the route for an operand in half the L2 at run time and widens the unfolded input
  // into a copy, as the weight gradient does (at 81 pixels by that rule, at 36 by the small-operand one)
  expect_conv2d_on_bf16_values_as_in_f32<conv2d<64, 3, 1, same>, shape<16, 9, 9>, 2, false>();
  expect_conv2d_on_bf16_values_as_in_f32<conv2d<64, 3, 1, same>, shape<16, 6, 6>, 2, false>();
}

using mlp = model<input<2, 2>, flatten, dense<32>, relu, dense<16>, relu, dense<3>>;

TEST(bf16, a_program_keeps_f32_master_weights) {
  auto p = compile<mlp, batch<8>, precision<bf16>>(1);
  static_assert(std::is_same_v<decltype(p)::scalar_type, float>);
  static_assert(decltype(p)::bf16_gemm);
  static_assert(!decltype(compile<mlp, batch<8>>())::bf16_gemm);
  auto q = compile<mlp, batch<8>>(1);
  EXPECT_TRUE(std::equal(p.parameters().begin(), p.parameters().end(), q.parameters().begin()))
      << "the same seed gives the same f32 weights whatever the precision";
}

TEST(bf16, activations_are_stored_in_bf16) {
  static_assert(mlp::memory_plan<64, bf16>::activation_bytes * 2 == mlp::memory_plan<64>::activation_bytes,
                "bf16 activations take half the bytes of f32 ones");
  static_assert(mlp::memory_plan<64, bf16>::widened_elements == 0, "every layer of the MLP takes bf16 activations");
  static_assert(mlp::memory_plan<64, bf16>::gemm_weight_bytes ==
                (native_bf16_products ? 2 * mlp::parameters::buffer_size : 0));
  auto h = compile<mlp, batch<8>, precision<bf16>>(1);
  auto f = compile<mlp, batch<8>>(1);
  static_assert(std::is_same_v<decltype(h)::gemm_weight_type, std::conditional_t<native_bf16_products, bf16, float>>,
                "the GEMMs read a bf16 copy of the weights only where the CPU multiplies bf16");
  rng g(2);
  for (std::size_t i = 0; i < f.input().size(); ++i) f.input()[i] = h.input()[i] = static_cast<float>(g.uniform(-1, 1));
  h.forward();
  f.forward();
  double scale = 0;
  for (float v : f.output()) scale = std::max(scale, std::abs(static_cast<double>(v)));
  ASSERT_GT(scale, 0.1);
  for (std::size_t i = 0; i < h.output().size(); ++i) {
    const float v = h.output()[i];
    EXPECT_EQ(v, round_to_bf16(v)) << "output " << i << " is not a bf16 value: it was not stored in bf16";
    EXPECT_NEAR(v, f.output()[i], 0.03 * scale) << "output " << i;
  }
}

TEST(bf16, the_weights_copy_follows_every_change_to_the_parameters) {
  // The GEMMs read a bf16 copy of the parameters, made at the start of each
  // forward pass: a change made through parameters() between two passes must
  // reach the next one (a stale copy would give the old output).
  auto p = compile<mlp, batch<8>, precision<bf16>>(3);
  rng g(4);
  for (auto& x : p.input()) x = static_cast<float>(g.uniform(-1, 1));
  p.forward();
  const std::vector<float> before(p.output().begin(), p.output().end());
  for (auto& w : p.layer_parameter<4>()) w *= 1.5f;
  p.forward();
  auto fresh = compile<mlp, batch<8>, precision<bf16>>(99);
  fresh.assign_parameters(p);
  std::copy(p.input().begin(), p.input().end(), fresh.input().begin());
  fresh.forward();
  EXPECT_FALSE(std::equal(before.begin(), before.end(), p.output().begin()));
  EXPECT_TRUE(std::equal(fresh.output().begin(), fresh.output().end(), p.output().begin()));
  // and after a training step, which changes every weight
  std::vector<std::uint32_t> labels(8, 1);
  sgd opt{.lr = 0.1f};
  sgd::state<float> state(p.parameters().size());
  kiln::train_step(p, labels, opt, state);
  p.forward();
  fresh.assign_parameters(p);
  fresh.forward();
  EXPECT_TRUE(std::equal(fresh.output().begin(), fresh.output().end(), p.output().begin()));
}

TEST(bf16, replicas_compute_what_one_program_computes) {
  // replicate<2> × 4 samples against one program of 8: the same outputs bit
  // for bit (each sample's column is computed alike), and the same gradient
  // up to the order of the replicas' sums.
  auto one = compile<mlp, batch<8>, precision<bf16>>(6);
  auto two = compile<mlp, batch<4>, replicate<2>, precision<bf16>>(6);
  rng g(7);
  for (std::size_t i = 0; i < one.input().size(); ++i)
    one.input()[i] = two.input()[i] = static_cast<float>(g.uniform(-1, 1));
  std::vector<std::uint32_t> labels(8);
  for (auto& l : labels) l = static_cast<std::uint32_t>(g.below(3));
  one.forward();
  two.forward();
  EXPECT_TRUE(std::equal(one.output().begin(), one.output().end(), two.output().begin()));
  one.backward(labels);
  two.backward(labels);
  for (std::size_t i = 0; i < one.gradients().size(); ++i)
    ASSERT_NEAR(two.gradients()[i], one.gradients()[i], 1e-6 + 1e-5 * std::abs(one.gradients()[i])) << i;
}

/// One forward and backward of M in bf16 against the same in f32 (same
/// seed and data): the losses within `tolerance` relative, and the gradient
/// vectors within `tolerance` in relative L2 norm. Inputs are token ids
/// below `vocab` when it is non-zero.
template <class M, class Loss = softmax_cross_entropy<>>
void expect_bf16_tracks_f32(std::uint32_t classes, std::uint32_t vocab, double tolerance) {
  auto f = compile<M, batch<4>, Loss>(11);
  auto h = compile<M, batch<4>, precision<bf16>, Loss>(11);
  rng g(5);
  for (std::size_t i = 0; i < f.input().size(); ++i)
    f.input()[i] = h.input()[i] = vocab ? static_cast<float>(g.below(vocab)) : static_cast<float>(g.uniform(-1, 1));
  std::vector<typename decltype(f)::target_type> targets(4 * decltype(f)::targets_per_sample);
  for (auto& t : targets) t = static_cast<typename decltype(f)::target_type>(g.below(classes));
  f.forward();
  h.forward();
  const double lf = f.backward(targets).loss, lh = h.backward(targets).loss;
  EXPECT_NEAR(lh, lf, tolerance * std::abs(lf));
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < f.gradients().size(); ++i) {
    const double d = static_cast<double>(h.gradients()[i]) - f.gradients()[i];
    diff += d * d;
    norm += static_cast<double>(f.gradients()[i]) * f.gradients()[i];
  }
  ASSERT_GT(norm, 0);
  EXPECT_LT(std::sqrt(diff / norm), tolerance);
}

struct tokens;
TEST(bf16, every_kind_of_layer_runs_on_bf16_activations) {
  // Layers that take bf16 (dense, conv2d, pooling, batch_norm, layer_norm,
  // dropout, the element-wise activations, residual and transformer blocks)
  // and layers that run on widened f32 copies (embeddings and unembed at the
  // top level, attention inside blocks), in one model each.
  using cnn = model<input<2, 10, 10>, conv2d<4, 3, 1, same>, batch_norm, relu, max_pool<2>, conv2d<6, 3, 2, 1>,
                    kiln::tanh, avg_pool<3, 1>, flatten, dense<12>, dropout<1, 4>, sigmoid, dense<5>>;
  static_assert(cnn::memory_plan<4, bf16>::widened_elements == 0, "every layer of this CNN takes bf16");
  expect_bf16_tracks_f32<cnn>(5, 0, 0.05);
  // 300 token ids: ids above 256 are not bf16 values, so the input must reach the embedding unrounded
  using lm = model<input_tokens<6>, embedding<300, 16, tied<tokens>>, position_embedding, transformer_block<2, 24>,
                   residual<position_wise<dense<16>>, gelu>, layer_norm, unembed<tied<tokens>>>;
  // the layers inside the transformer block and the residual store theirs in bf16 too
  static_assert(lm::memory_plan<4, bf16>::saved_bytes < lm::memory_plan<4>::saved_bytes * 3 / 4);
  static_assert(lm::memory_plan<4, bf16>::widened_elements > 0, "the embeddings compute in f32");
  expect_bf16_tracks_f32<lm>(300, 300, 0.05);
  // a dense layer without bias, untied and tied
  struct shared;
  using no_bias_net =
      model<input<6>, dense<5, no_bias>, relu, dense<5, no_bias, tied<shared>>, kiln::tanh, dense<5, tied<shared>>>;
  expect_bf16_tracks_f32<no_bias_net>(5, 0, 0.05);
}

struct nested_tokens;
struct encoder : model<input_tokens<4>, embedding<300, 8, tied<nested_tokens>>, position_embedding> {};
struct row_encoder : model<input_tokens<4>, embedding<300, 2>, flatten> {};
TEST(bf16, token_ids_reach_an_embedding_inside_a_model_used_as_a_layer_unrounded) {
  // The first layer is a model used as a layer, which takes bf16; its own
  // first layer is an embedding, so the program keeps the input in f32 and
  // runs that layer in f32 (ids 257 and 299 would round to 256 and 300).
  using lm = model<input_tokens<4>, encoder, layer_norm, unembed<tied<nested_tokens>>>;
  static_assert(!lm::memory_plan<4, bf16>::input_in_bf16);
  static_assert(lm::memory_plan<4, bf16>::widened[0]);
  expect_bf16_tracks_f32<lm>(300, 300, 0.05);
  auto p = compile<lm, batch<1>, precision<bf16>>(1);
  const float ids[4] = {257, 299, 3, 299};
  std::copy(std::begin(ids), std::end(ids), p.input().begin());
  EXPECT_NO_THROW(p.forward());
  // the same through position_wise<a model used as a layer>
  using rows = model<input<3, 4>, position_wise<row_encoder>, flatten, dense<3>>;
  static_assert(!rows::memory_plan<4, bf16>::input_in_bf16);
  expect_bf16_tracks_f32<rows>(3, 300, 0.05);
}

TEST(bf16, training_tracks_the_f32_loss_curve) {
  // Same data, seed and optimizer; the only difference is the GEMMs' operand
  // rounding. Each epoch's mean training loss must stay within 0.02 + 10 % of
  // the f32 run's (single-batch losses are too noisy to compare one by one).
  const dataset data = kiln::testing::blobs(480, 3);
  auto run = [&](auto p) {
    trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f}};
    std::vector<double> losses;
    t.fit(data, epochs{8}, {.seed = 1, .progress = progress_mode::none, .on_epoch_end = [&](const epoch_metrics& m) {
                              losses.push_back(m.train.loss);
                            }});
    return std::pair{losses, t.evaluate(data).accuracy};
  };
  const auto [f32, f32_accuracy] = run(compile<mlp, batch<16>>(2));
  const auto [b16, b16_accuracy] = run(compile<mlp, batch<16>, precision<bf16>>(2));
  ASSERT_EQ(f32.size(), 8u);
  ASSERT_EQ(b16.size(), 8u);
  for (std::size_t i = 0; i < f32.size(); ++i) EXPECT_NEAR(b16[i], f32[i], 0.02 + 0.1 * f32[i]) << "epoch " << i + 1;
  EXPECT_LT(f32.back(), 0.5 * f32.front()) << "the f32 run must learn for the comparison to mean anything";
  EXPECT_NEAR(b16_accuracy, f32_accuracy, 0.02);
}

TEST(bf16, checkpoints_hold_f32_master_weights_and_cross_precisions) {
  // (one directory per process: four test executables compile this file,
  // and ctest -j runs them side by side)
  const auto dir = std::filesystem::temp_directory_path() / ("kiln_bf16_checkpoint_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto b = compile<mlp, batch<8>, precision<bf16>>(3);
  for (auto& w : b.layer_parameter<2>()) w += 1e-4f;  // not representable in bf16: must survive exactly
  save_checkpoint(dir / "bf16.kiln", b);
  auto f = compile<mlp, batch<8>>(4);
  load_checkpoint(dir / "bf16.kiln", f);
  EXPECT_TRUE(std::equal(b.parameters().begin(), b.parameters().end(), f.parameters().begin()));
  save_checkpoint(dir / "f32.kiln", f);
  auto back = compile<mlp, batch<8>, precision<bf16>>(5);
  load_checkpoint(dir / "f32.kiln", back);
  EXPECT_TRUE(std::equal(f.parameters().begin(), f.parameters().end(), back.parameters().begin()));
  std::filesystem::remove_all(dir);
}

}  // namespace
