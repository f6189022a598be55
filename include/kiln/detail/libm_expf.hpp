// kiln/detail/libm_expf.hpp — e^x in f32 with the bits of glibc's expf,
// 8 at a time on AVX-512, 4 with AVX2 + FMA; in a build for the x86-64
// baseline 4 in SSE2 (two halves), with the FMA instruction where the CPU
// has it (compiled for FMA, chosen at run time) or fma emulated where it
// has neither FMA nor FMA4; else one at a time.
//
// WHAT IT IS
//   The algorithm of ARM's optimized-routines expf, which glibc ≥ 2.28 ships
//   (built with fused multiply-adds for, and selected on, x86-64 CPUs with
//   FMA and AVX2): x·32/ln2 = k + r in double,
//   2^(k/32) from a 32-entry table, a cubic in r, one rounding to f32 at the
//   end; its published constants, its special cases (overflow above 88.72,
//   0 below −103.97, the smallest subnormal down to −103.28). Written here
//   with explicit fused multiply-adds (computed exactly without FMA), so
//   the same bits on every CPU, as glibc's own FMA build computes them. (On
//   a CPU without FMA and AVX2 glibc's expf is its build without fused
//   operations, which may differ from those bits in the last place for
//   rare arguments; kiln keeps the FMA build's there too.)
// WHY
//   softmax_cross_entropy's f32 gradients were computed with std::exp; this
//   keeps their bits (training results do not move, on CPUs with FMA and
//   AVX2) while vectorising the loss. tests/detail/vector_math_test.cpp
//   compares it with the scalar definition on every float of [−110, 90] it
//   sweeps, and with std::exp where glibc takes its FMA build.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <limits>
#include <type_traits>

#include <kiln/detail/avx512.hpp>
#include <kiln/detail/cpu_features.hpp>
#if !defined(__AVX512F__) && ((defined(__AVX2__) && defined(__FMA__)) || defined(__SSE2_MATH__))
#include <immintrin.h>
#endif

KILN_AVX512_BEGIN

namespace kiln::detail::libm_expf {

/// bits(2^(i/32)) − (i << 47): adding k << 47 gives 2^(k/32)'s bits.
inline constexpr std::uint64_t table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540};
inline constexpr double inv_ln2_32 = 0x1.71547652b82fep+5, shift = 0x1.8p+52;
inline constexpr double c0 = 0x1.c6af84b912394p-20, c1 = 0x1.ebfce50fac4f3p-13, c2 = 0x1.62e42ff0c52d6p-6;

/// 1 in a build for x86 whose doubles are SSE2's (not x87's extended
/// precision) and that cannot fuse a·b + c (no FMA, FMA4 or AVX-512F: the
/// x86-64 baseline), so may run on a CPU without FMA: there exp_shifted
/// asks the CPU (cpu_has_fma, then cpu_fuses). Elsewhere it takes std::fma.
/// (Not under -ffast-math, which may reassociate exact_fma's sums; nor may
/// -fassociative-math alone be used, which the macro cannot see. g++ or
/// clang, as detail/cpu_features.hpp.)
#if defined(__SSE2_MATH__) && !defined(__FMA__) && !defined(__FMA4__) && !defined(__AVX512F__) && \
    !defined(__FAST_MATH__) && defined(__GNUC__)
#define KILN_DETAIL_EXACT_FMA 1
#else
#define KILN_DETAIL_EXACT_FMA 0
#endif

/// a·b + c rounded once, as std::fma does, in each of two lanes, in
/// double arithmetic without a fused multiply-add (Boldo and Melquiond,
/// "Emulation of FMA and correctly rounded sums: proved algorithms using
/// rounding to odd", IEEE TC 2008): a·b exact as uh + ul (Dekker's
/// product), the exact sums of c, ul and uh, the small part rounded to odd
/// before the one rounding to nearest. In each lane, for finite operands
/// with |a|, |b| < 2^995, a·b = 0 or 2^-969 < |a·b| < 2^1023 (Dekker's
/// error term exact), and |c| and the sums below 2^1023: exp's, below; a
/// zero result may have the other sign (−0·1 + −0 gives +0); in the
/// default rounding to nearest. Only in a build whose compiler cannot fuse
/// its products and sums itself (KILN_DETAIL_EXACT_FMA).
#if KILN_DETAIL_EXACT_FMA
inline __m128d exact_fma(__m128d a, __m128d b, __m128d c) {
  const auto two_sum = [](__m128d x, __m128d y, __m128d& e) {
    const __m128d s = _mm_add_pd(x, y), yy = _mm_sub_pd(s, x);
    e = _mm_add_pd(_mm_sub_pd(x, _mm_sub_pd(s, yy)), _mm_sub_pd(y, yy));
    return s;
  };
  const auto split = [](__m128d x, __m128d& lo) {
    const __m128d t = _mm_mul_pd(_mm_set1_pd(134217729.0), x), hi = _mm_sub_pd(t, _mm_sub_pd(t, x));
    lo = _mm_sub_pd(x, hi);
    return hi;
  };
  __m128d al, bl, tl, vl, we;
  const __m128d ah = split(a, al), bh = split(b, bl), uh = _mm_mul_pd(a, b);
  const __m128d ul = _mm_add_pd(
      _mm_add_pd(_mm_add_pd(_mm_sub_pd(_mm_mul_pd(ah, bh), uh), _mm_mul_pd(ah, bl)), _mm_mul_pd(al, bh)),
      _mm_mul_pd(al, bl));
  const __m128d th = two_sum(c, ul, tl), vh = two_sum(uh, th, vl);
  const __m128d w = two_sum(vl, tl, we);
  // where we ≠ 0 and w even: w one step towards we (w ≠ 0 there): bits + 1
  // where w and we have one sign, bits − 1 = bits + 1 + 2·(−1) where not
  const __m128i bits = _mm_castpd_si128(w), one = _mm_set_epi32(0, 1, 0, 1);
  const __m128i even = _mm_shuffle_epi32(_mm_cmpeq_epi32(_mm_and_si128(bits, one), _mm_setzero_si128()),
                                         _MM_SHUFFLE(2, 2, 0, 0));
  const __m128i step = _mm_and_si128(even, _mm_castpd_si128(_mm_cmpneq_pd(we, _mm_setzero_pd())));
  const __m128i opposite =
      _mm_shuffle_epi32(_mm_srai_epi32(_mm_xor_si128(bits, _mm_castpd_si128(we)), 31), _MM_SHUFFLE(3, 3, 1, 1));
  const __m128i stepped = _mm_add_epi64(_mm_add_epi64(_mm_add_epi64(bits, one), opposite), opposite);
  return _mm_add_pd(vh, _mm_castsi128_pd(_mm_or_si128(_mm_and_si128(step, stepped), _mm_andnot_si128(step, bits))));
}

/// Two-lane multiply-adds: exact_fma (exp_shifted_by's and exp's where the
/// CPU cannot fuse), or the FMA instruction (exp_shifted_by's where the CPU
/// has FMA; inlined only into code compiled for FMA: run_compiled_for_fma,
/// detail/cpu_features.hpp).
struct emulated_fma2 {
  __m128d operator()(__m128d a, __m128d b, __m128d c) const { return exact_fma(a, b, c); }
};
struct instruction_fma2 {
  [[gnu::target("fma")]] __m128d operator()(__m128d a, __m128d b, __m128d c) const { return _mm_fmadd_pd(a, b, c); }
};

/// A two-lane multiply-add on one triple, in its first lane: exp_by's
/// multiply-add in exp_shifted_by's tail, and in exp where the CPU cannot
/// fuse (first_lane_of<emulated_fma2>: one definition, tested lane by lane).
template <class Fma2>
struct first_lane_of {
  static_assert(std::is_empty_v<Fma2>, "kiln: first_lane_of makes its own Fma2: a multiply-add without state");
  double operator()(double a, double b, double c) const {
    return _mm_cvtsd_f64(Fma2{}(_mm_set_sd(a), _mm_set_sd(b), _mm_set_sd(c)));
  }
};
#endif

/// std::fma as a function object (exp_by's multiply-add).
struct library_fma {
  double operator()(double a, double b, double c) const { return std::fma(a, b, c); }
};

#if KILN_DETAIL_EXACT_FMA
/// True when the CPU fuses a·b + c (FMA, or FMA4 alone: Bulldozer), where
/// glibc's std::fma is the instruction; asked once. Where not, glibc's is
/// software (a call with floating-point environment changes, ≈ 17×
/// exact_fma's time), so exact_fma computes the same double.
inline bool cpu_fuses() { return cpu_has_fma() || cpu_has_fma4(); }
#endif

/// True when x takes the special path: |x| ≥ 88, inf, NaN.
inline bool special(float x) { return ((std::bit_cast<std::uint32_t>(x) >> 20) & 0x7FF) > 0x42A; }

/// e^x, its multiply-adds fused by `fused` (library_fma, or first_lane_of
/// a two-lane one).
template <class Fma>
float exp_by(float x, Fma fused) {
  if (special(x)) {
    if (x == -std::numeric_limits<float>::infinity()) return 0.0f;
    if (((std::bit_cast<std::uint32_t>(x) >> 20) & 0x7FF) > 0x7F7) return x + x;  // NaN, +inf
    if (x > 0x1.62e42ep6f) return std::numeric_limits<float>::infinity();
    if (x < -0x1.9fe368p6f) return 0.0f;
    if (x < -0x1.9d1d9ep6f) return 0x1p-149f;
  }
  const double xd = x, shifted = fused(inv_ln2_32, xd, shift);
  const std::uint64_t k = std::bit_cast<std::uint64_t>(shifted);
  const double r = fused(inv_ln2_32, xd, -(shifted - shift));
  const double s = std::bit_cast<double>(table[k % 32] + (k << 47));
  const double y = fused(fused(r, c0, c1), r * r, fused(r, c2, 1.0));
  return static_cast<float>(y * s);
}

/// e^x: exp_by with std::fma; in a build for the x86-64 baseline on a CPU
/// that cannot fuse, with exact_fma.
inline float exp(float x) {
#if KILN_DETAIL_EXACT_FMA
  if (!cpu_fuses()) return exp_by(x, first_lane_of<emulated_fma2>{});
#endif
  return exp_by(x, library_fma{});
}

/// values[j] = exp(args[j]) · scale for each bit j set in `lanes`: the
/// vector loops' lanes that take the special path.
inline void patch_special(const float* args, float* values, unsigned lanes, float scale) {
  for (unsigned j = 0; lanes; lanes >>= 1, ++j)
    if (lanes & 1u) values[j] = exp(args[j]) * scale;
}

#if (!defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)) || KILN_DETAIL_EXACT_FMA
/// Stores 4 values of the 4-lane loops, those of arguments on the special
/// path computed again by exp.
inline void store_patched(__m128 args4, __m128 values4, float scale, float* y) {
  const int odd = _mm_movemask_ps(_mm_castsi128_ps(_mm_cmpgt_epi32(
      _mm_and_si128(_mm_srli_epi32(_mm_castps_si128(args4), 20), _mm_set1_epi32(0x7FF)), _mm_set1_epi32(0x42A))));
  if (odd != 0) [[unlikely]] {
    alignas(16) float args[4], values[4];
    _mm_store_ps(args, args4);
    _mm_store_ps(values, values4);
    patch_special(args, values, static_cast<unsigned>(odd), scale);
    values4 = _mm_load_ps(values);
  }
  _mm_storeu_ps(y, values4);
}
#endif

#if KILN_DETAIL_EXACT_FMA
/// exp_shifted (below) 4 at a time in two halves of 2 doubles, each
/// multiply-add `fused` on both lanes (the tail on its first lane): the
/// same bits as exp_shifted, with either of the two (instruction_fma2 on a
/// CPU with FMA only, in run_compiled_for_fma).
struct exp_shifted_by {
  template <class Fma2>
  void operator()(Fma2 fused, const float* x, float m, float l, float scale, float* y, std::size_t n) const;
};
template <class Fma2>
void exp_shifted_by::operator()(Fma2 fused, const float* x, float m, float l, float scale, float* y,
                                std::size_t n) const {
  std::size_t i = 0;
  const __m128d inv = _mm_set1_pd(inv_ln2_32), sh = _mm_set1_pd(shift), one = _mm_set1_pd(1.0);
  const auto half = [&](__m128d xd) {  // e^x of 2 lanes, in the low half
    const __m128d shifted = fused(inv, xd, sh);
    const __m128d r = fused(inv, xd, _mm_xor_pd(_mm_sub_pd(shifted, sh), _mm_set1_pd(-0.0)));
    alignas(16) std::uint64_t k[2];
    _mm_store_si128(reinterpret_cast<__m128i*>(k), _mm_castpd_si128(shifted));
    const __m128d s = _mm_castsi128_pd(_mm_set_epi64x(static_cast<long long>(table[k[1] % 32] + (k[1] << 47)),
                                                      static_cast<long long>(table[k[0] % 32] + (k[0] << 47))));
    const __m128d p =
        fused(fused(r, _mm_set1_pd(c0), _mm_set1_pd(c1)), _mm_mul_pd(r, r), fused(r, _mm_set1_pd(c2), one));
    return _mm_cvtpd_ps(_mm_mul_pd(p, s));
  };
  for (; i < n / 4 * 4; i += 4) {  // (i + 4 <= n made g++ warn of i overflowing, inlined into the loss)
    const __m128 a4 = _mm_sub_ps(_mm_sub_ps(_mm_loadu_ps(x + i), _mm_set1_ps(m)), _mm_set1_ps(l));
    const __m128 out = _mm_mul_ps(_mm_movelh_ps(half(_mm_cvtps_pd(a4)), half(_mm_cvtps_pd(_mm_movehl_ps(a4, a4)))),
                                  _mm_set1_ps(scale));
    store_patched(a4, out, scale, y + i);
  }
  for (; i < n; ++i) y[i] = exp_by((x[i] - m) - l, first_lane_of<Fma2>{}) * scale;
}

/// exp_shifted_by with exact_fma: exp_shifted takes it where the CPU cannot fuse.
inline void exp_shifted_emulated(const float* x, float m, float l, float scale, float* y, std::size_t n) {
  exp_shifted_by{}(emulated_fma2{}, x, m, l, scale, y, n);
}
#endif

// GCC 12 warns, where exp_shifted is inlined with a constant n or into a
// caller's fixed block, that an iteration of its scalar tail "invokes
// undefined behavior" (-Waggressive-loop-optimizations, iteration 2^62 − 1:
// where y + i would wrap); the tail writes y[i] for i < n only. A false
// alarm that a user's -Werror build would stop on (the package test's did,
// on AVX2).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
#endif

/// y[i] = e^((x[i] − m) − l) · scale (each step rounded to f32, as the
/// scalar expression would be). y may alias x.
inline void exp_shifted(const float* x, float m, float l, float scale, float* y, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  const __m512d inv = _mm512_set1_pd(inv_ln2_32), sh = _mm512_set1_pd(shift), one = _mm512_set1_pd(1.0);
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 8),
                t2 = _mm512_loadu_si512(table + 16), t3 = _mm512_loadu_si512(table + 24);
  for (; i < n; i += 8) {
    const __mmask8 lanes = n - i >= 8 ? __mmask8(0xFF) : static_cast<__mmask8>((1u << (n - i)) - 1);
    const __m512 x16 = _mm512_maskz_loadu_ps(static_cast<__mmask16>(lanes), x + i);
    const __m512 a16 = _mm512_sub_ps(_mm512_sub_ps(x16, _mm512_set1_ps(m)), _mm512_set1_ps(l));
    const __m512d xd = _mm512_cvtps_pd(_mm512_castps512_ps256(a16));
    const __m512d shifted = _mm512_fmadd_pd(inv, xd, sh);
    const __m512i k = _mm512_castpd_si512(shifted);
    const __m512d r = _mm512_fmsub_pd(inv, xd, _mm512_sub_pd(shifted, sh));
    const __m512i idx = _mm512_and_si512(k, _mm512_set1_epi64(31));
    const __m512i t = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(idx, _mm512_set1_epi64(16)),
                                              _mm512_permutex2var_epi64(t0, idx, t1),
                                              _mm512_permutex2var_epi64(t2, idx, t3));
    const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64(k, 47)));
    const __m512d p = _mm512_fmadd_pd(_mm512_fmadd_pd(r, _mm512_set1_pd(c0), _mm512_set1_pd(c1)), _mm512_mul_pd(r, r),
                                      _mm512_fmadd_pd(r, _mm512_set1_pd(c2), one));
    const __m256 e = _mm512_cvtpd_ps(_mm512_mul_pd(p, s));
    __m512 out = _mm512_mul_ps(_mm512_castps256_ps512(e), _mm512_set1_ps(scale));
    // the special path (|arg| ≥ 88, inf, NaN) lane by lane, from the arguments (y may be x): rare in a loss
    const __mmask16 odd = _mm512_mask_cmp_epi32_mask(
        static_cast<__mmask16>(lanes),
        _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(a16), 20), _mm512_set1_epi32(0x7FF)),
        _mm512_set1_epi32(0x42A), _MM_CMPINT_NLE);
    if (odd != 0) [[unlikely]] {
      alignas(64) float args[16], values[16];
      _mm512_store_ps(args, a16);
      _mm512_store_ps(values, out);
      patch_special(args, values, odd, scale);
      out = _mm512_load_ps(values);
    }
    _mm512_mask_storeu_ps(y + i, static_cast<__mmask16>(lanes), out);
  }
#elif defined(__AVX2__) && defined(__FMA__)
  // (the same operations 4 at a time, the table gathered)
  const __m256d inv = _mm256_set1_pd(inv_ln2_32), sh = _mm256_set1_pd(shift), one = _mm256_set1_pd(1.0);
  for (; i + 4 <= n; i += 4) {
    const __m128 a4 = _mm_sub_ps(_mm_sub_ps(_mm_loadu_ps(x + i), _mm_set1_ps(m)), _mm_set1_ps(l));
    const __m256d xd = _mm256_cvtps_pd(a4);
    const __m256d shifted = _mm256_fmadd_pd(inv, xd, sh);
    const __m256i k = _mm256_castpd_si256(shifted);
    const __m256d r = _mm256_fmsub_pd(inv, xd, _mm256_sub_pd(shifted, sh));
    const __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(table),
                                             _mm256_and_si256(k, _mm256_set1_epi64x(31)), 8);
    const __m256d s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64(k, 47)));
    const __m256d p = _mm256_fmadd_pd(_mm256_fmadd_pd(r, _mm256_set1_pd(c0), _mm256_set1_pd(c1)), _mm256_mul_pd(r, r),
                                      _mm256_fmadd_pd(r, _mm256_set1_pd(c2), one));
    const __m128 out = _mm_mul_ps(_mm256_cvtpd_ps(_mm256_mul_pd(p, s)), _mm_set1_ps(scale));
    store_patched(a4, out, scale, y + i);
  }
#elif KILN_DETAIL_EXACT_FMA
  // (the FMA instruction where the CPU has it, compiled for it; exact_fma where it cannot fuse; else glibc's fma)
  if (cpu_has_fma()) {
    run_compiled_for_fma(exp_shifted_by{}, instruction_fma2{}, x, m, l, scale, y, n);
    return;
  }
  if (!cpu_fuses()) {
    exp_shifted_emulated(x, m, l, scale, y, n);
    return;
  }
#endif
  for (; i < n; ++i) y[i] = exp_by((x[i] - m) - l, library_fma{}) * scale;
}

/// Σ e^(x[i] − m) in index order, without storing the values.
inline float sum_exp_shifted(const float* x, float m, std::size_t n) {
  alignas(64) float block[64];
  float sum = 0;
  for (std::size_t i = 0; i < n; i += 64) {
    const std::size_t k = n - i < 64 ? n - i : 64;
    exp_shifted(x + i, m, 0.0f, 1.0f, block, k);
    for (std::size_t j = 0; j < k; ++j) sum += block[j];
  }
  return sum;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace kiln::detail::libm_expf

KILN_AVX512_END
