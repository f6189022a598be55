// kiln/detail/vector_packs.hpp — the "packs" kiln's vectorised f32 functions
// (detail/vector_math.hpp) are written on: one float (scalar_pack), 16
// (avx512_pack) or 8 (avx2_pack, AVX2 + FMA), each with the same operations
// (set, masked load and store of a tail, fma, add, sub, mul, div, max, min,
// comparisons into a mask, both, all, select, abs, xor_sign, exp2_pair,
// lookup_bf16), so that one sequence of them gives an element the same bits
// in every pack; and 4 (sse2_pack: x86-64 without AVX2 + FMA, fused
// multiply-adds the instruction where there is one, else computed exact in
// double).
// `native_pack` is the widest the target has. In a build for the x86-64
// baseline a CPU with FMA runs sse2_fma_pack, compiled for FMA, instead
// (with_pack: vector_math.hpp's functions call it).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <kiln/detail/avx512.hpp>
#include <kiln/detail/cpu_features.hpp>
#if !defined(__AVX512F__) && (defined(__AVX2__) || defined(__SSE2__))
#include <immintrin.h>
#endif
#if !defined(__AVX512F__) && defined(__FMA4__)
#include <x86intrin.h>  // (FMA4's _mm_macc_ps)
#endif

KILN_AVX512_BEGIN

namespace kiln::detail::vmath {

/// One float at a time; `max(a, b)` is `a > b ? a : b` like MAXPS (b when
/// either is NaN), so the packs clamp NaN the same way (they keep it).
struct scalar_pack {
  using v = float;
  using mask = bool;
  static constexpr std::size_t width = 1;
  static v set(float a) { return a; }
  static v load(const float* p, std::size_t) { return *p; }
  static void store(float* p, v x, std::size_t) { *p = x; }
  static v fma(v a, v b, v c) { return std::fma(a, b, c); }
  static v add(v a, v b) { return a + b; }
  static v sub(v a, v b) { return a - b; }
  static v mul(v a, v b) { return a * b; }
  static v div(v a, v b) { return a / b; }
  static v max(v a, v b) { return a > b ? a : b; }
  static v min(v a, v b) { return a < b ? a : b; }
  static mask less(v a, v b) { return a < b; }
  static mask both(mask a, mask b) { return a && b; }
  static bool all(mask k) { return k; }
  static v select(mask k, v a, v b) { return k ? a : b; }
  static v abs(v a) { return std::bit_cast<float>(std::bit_cast<std::uint32_t>(a) & 0x7FFFFFFFu); }
  /// `a` with the sign of `a` flipped where `s` is negative.
  static v xor_sign(v a, v s) {
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(a) ^ (std::bit_cast<std::uint32_t>(s) & 0x80000000u));
  }
  /// 2^(n/2 rounded down) and 2^(n − that), n = bits(t) − bits(base).
  static void exp2_pair(v t, v base, v& s1, v& s2) {
    const auto n = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(t) - std::bit_cast<std::uint32_t>(base));
    const std::int32_t n1 = n >> 1, n2 = n - n1;
    s1 = std::bit_cast<float>(static_cast<std::uint32_t>(n1 + 127) << 23);
    s2 = std::bit_cast<float>(static_cast<std::uint32_t>(n2 + 127) << 23);
  }
  /// A bf16 table's entry for x (detail/bf16_value_table.hpp): where x is a
  /// bf16 value (its low 16 bits zero) whose bits without the sign, b, lie
  /// in [first, first + count), table[b − first], or table[count + b − first]
  /// for a negative x; `found` says where it was (0 elsewhere).
  static v lookup_bf16(const float* table, v x, std::uint32_t first, std::uint32_t count, mask& found) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(x), i = ((u >> 16) & 0x7FFFu) - first;
    found = (u & 0xFFFFu) == 0 && i < count;
    return found ? table[i + (u >> 31) * count] : 0.0f;
  }
};

#if defined(__AVX512F__)
struct avx512_pack {
  using v = __m512;
  using mask = __mmask16;
  static constexpr std::size_t width = 16;
  static v set(float a) { return _mm512_set1_ps(a); }
  static v load(const float* p, std::size_t n) {
    return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(avx512::lanes(static_cast<std::ptrdiff_t>(n)), p);
  }
  static void store(float* p, v x, std::size_t n) {
    if (n >= 16) {
      _mm512_storeu_ps(p, x);
    } else {
      _mm512_mask_storeu_ps(p, avx512::lanes(static_cast<std::ptrdiff_t>(n)), x);
    }
  }
  static v fma(v a, v b, v c) { return _mm512_fmadd_ps(a, b, c); }
  static v add(v a, v b) { return _mm512_add_ps(a, b); }
  static v sub(v a, v b) { return _mm512_sub_ps(a, b); }
  static v mul(v a, v b) { return _mm512_mul_ps(a, b); }
  static v div(v a, v b) { return _mm512_div_ps(a, b); }
  static v max(v a, v b) { return _mm512_max_ps(a, b); }
  static v min(v a, v b) { return _mm512_min_ps(a, b); }
  static mask less(v a, v b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static mask both(mask a, mask b) { return static_cast<mask>(a & b); }
  static bool all(mask k) { return k == 0xFFFF; }
  static v select(mask k, v a, v b) { return _mm512_mask_blend_ps(k, b, a); }
  static v abs(v a) { return bits_and(a, 0x7FFFFFFF); }
  static v xor_sign(v a, v s) {
    return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_castps_si512(bits_and(s, INT32_MIN))));
  }
  static void exp2_pair(v t, v base, v& s1, v& s2) {
    const __m512i n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(base));
    const __m512i n1 = _mm512_srai_epi32(n, 1), n2 = _mm512_sub_epi32(n, n1), bias = _mm512_set1_epi32(127);
    s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, bias), 23));
    s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, bias), 23));
  }
  static v lookup_bf16(const float* table, v x, std::uint32_t first, std::uint32_t count, mask& found) {
    const __m512i u = _mm512_castps_si512(x), n = _mm512_set1_epi32(static_cast<int>(count));
    const __m512i i = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x7FFF)),
                                       _mm512_set1_epi32(static_cast<int>(first)));
    found = _mm512_mask_cmplt_epu32_mask(_mm512_testn_epi32_mask(u, _mm512_set1_epi32(0xFFFF)), i, n);
    const __m512i at = _mm512_mask_add_epi32(i, _mm512_cmplt_epi32_mask(u, _mm512_setzero_si512()), i, n);
    return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), found, at, table, 4);
  }

 private:
  static v bits_and(v a, std::int32_t m) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(m)));
  }
};
#endif

#if defined(__AVX2__) && defined(__FMA__)
struct avx2_pack {
  using v = __m256;
  using mask = __m256;
  static constexpr std::size_t width = 8;
  static v set(float a) { return _mm256_set1_ps(a); }
  static v load(const float* p, std::size_t n) { return n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes(n)); }
  static void store(float* p, v x, std::size_t n) {
    if (n >= 8) {
      _mm256_storeu_ps(p, x);
    } else {
      _mm256_maskstore_ps(p, lanes(n), x);
    }
  }
  static v fma(v a, v b, v c) { return _mm256_fmadd_ps(a, b, c); }
  static v add(v a, v b) { return _mm256_add_ps(a, b); }
  static v sub(v a, v b) { return _mm256_sub_ps(a, b); }
  static v mul(v a, v b) { return _mm256_mul_ps(a, b); }
  static v div(v a, v b) { return _mm256_div_ps(a, b); }
  static v max(v a, v b) { return _mm256_max_ps(a, b); }
  static v min(v a, v b) { return _mm256_min_ps(a, b); }
  static mask less(v a, v b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static mask both(mask a, mask b) { return _mm256_and_ps(a, b); }
  static bool all(mask k) { return _mm256_movemask_ps(k) == 0xFF; }
  static v select(mask k, v a, v b) { return _mm256_blendv_ps(b, a, k); }
  static v abs(v a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))); }
  static v xor_sign(v a, v s) {
    return _mm256_xor_ps(a, _mm256_and_ps(s, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN))));
  }
  static void exp2_pair(v t, v base, v& s1, v& s2) {
    const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(base));
    const __m256i n1 = _mm256_srai_epi32(n, 1), n2 = _mm256_sub_epi32(n, n1), bias = _mm256_set1_epi32(127);
    s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  }
  static v lookup_bf16(const float* table, v x, std::uint32_t first, std::uint32_t count, mask& found) {
    const __m256i u = _mm256_castps_si256(x), n = _mm256_set1_epi32(static_cast<int>(count));
    const __m256i i = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x7FFF)),
                                       _mm256_set1_epi32(static_cast<int>(first)));
    // (0 ≤ i < count, signed: |i| < 2¹⁶; and the low half of x zero)
    const __m256i in = _mm256_and_si256(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(-1)), _mm256_cmpgt_epi32(n, i));
    const __m256i ok =
        _mm256_and_si256(in, _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0xFFFF)), _mm256_setzero_si256()));
    const __m256i at = _mm256_add_epi32(i, _mm256_and_si256(_mm256_srai_epi32(u, 31), n));
    found = _mm256_castsi256_ps(ok);
    return _mm256_mask_i32gather_ps(_mm256_setzero_ps(), table, at, found, 4);
  }

 private:
  static __m256i lanes(std::size_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
};
#endif

#if defined(__SSE2__)
/// 4 floats (SSE2: x86-64 without AVX2 + FMA, what a build without -march
/// targets). With FMA but not AVX2 (AMD's Piledriver and Steamroller), or
/// FMA4 alone (-march=bdver1, Bulldozer), fma is the instruction, rounded
/// once. With no fused multiply-add instruction, fma is
/// computed in double and rounded once, as std::fma (a library call a value at a time,
/// in software on such a CPU) rounds it: the bits of every other pack. a·b
/// is exact in double (53 ≥ 24 + 24 bits); its sum with c rounded to
/// nearest rounds on to the right float except at a float midpoint, where
/// the sum is rounded to odd instead (rounded to nearest, then, where
/// inexact and even, one step towards the exact sum, which TwoSum gives):
/// a sum rounded to odd in 53 bits rounds to the nearest float as the exact
/// sum does (53 ≥ 24 + 2).
struct sse2_pack {
  using v = __m128;
  using mask = __m128;
  static constexpr std::size_t width = 4;
  static v set(float a) { return _mm_set1_ps(a); }
  static v load(const float* p, std::size_t n) {
    if (n >= 4) return _mm_loadu_ps(p);
    alignas(16) float t[4] = {};
    for (std::size_t i = 0; i < n; ++i) t[i] = p[i];
    return _mm_load_ps(t);
  }
  static void store(float* p, v x, std::size_t n) {
    if (n >= 4) {
      _mm_storeu_ps(p, x);
      return;
    }
    alignas(16) float t[4];
    _mm_store_ps(t, x);
    for (std::size_t i = 0; i < n; ++i) p[i] = t[i];
  }
  // (inlined into every kernel, the rare lanes' rounding to odd out of line)
  [[gnu::always_inline]] static v fma(v a, v b, v c) {
#if defined(__FMA__)
    return _mm_fmadd_ps(a, b, c);
#elif defined(__FMA4__)
    return _mm_macc_ps(a, b, c);
#else
    const __m128d a0 = _mm_cvtps_pd(a), b0 = _mm_cvtps_pd(b), c0 = _mm_cvtps_pd(c);
    const __m128d a1 = _mm_cvtps_pd(_mm_movehl_ps(a, a)), b1 = _mm_cvtps_pd(_mm_movehl_ps(b, b)),
                  c1 = _mm_cvtps_pd(_mm_movehl_ps(c, c));
    const __m128d s0 = _mm_add_pd(_mm_mul_pd(a0, b0), c0), s1 = _mm_add_pd(_mm_mul_pd(a1, b1), c1);
    // s, the sum rounded to nearest in double, rounds to the float the exact
    // sum rounds to unless s lies halfway between two floats (no float
    // midpoint lies strictly between s and the exact sum: each is a double).
    // A midpoint of normal floats (up to the one between the largest and
    // 2¹²⁸) has the low 29 of its 52 bits of mantissa 0x10000000; below
    // 2⁻¹²⁶ (the subnormal floats' midpoints, and zero) every s is taken as
    // one. Those lanes, rarely, take the sum rounded to odd.
    const auto suspects = [](__m128d s) {
      const __m128i bits = _mm_castpd_si128(s);
      const __m128i midpoint = _mm_cmpeq_epi32(_mm_and_si128(bits, _mm_set_epi32(0, 0x1FFFFFFF, 0, 0x1FFFFFFF)),
                                               _mm_set_epi32(0, 0x10000000, 0, 0x10000000));
      const __m128i tiny = _mm_cmplt_epi32(_mm_and_si128(bits, _mm_set_epi32(0x7FFFFFFF, 0, 0x7FFFFFFF, 0)),
                                           _mm_set_epi32(0x38100000, 0, 0x38100000, 0));
      // (the low words' test in bits 0 and 2, the high words' in bits 1 and 3)
      return (_mm_movemask_ps(_mm_castsi128_ps(midpoint)) & 0b0101) | (_mm_movemask_ps(_mm_castsi128_ps(tiny)) & 0b1010);
    };
    if ((suspects(s0) | suspects(s1)) != 0) [[unlikely]]
      return fma_rounded_to_odd(a0, b0, c0, a1, b1, c1);
    return _mm_movelh_ps(_mm_cvtpd_ps(s0), _mm_cvtpd_ps(s1));
#endif
  }
  static v add(v a, v b) { return _mm_add_ps(a, b); }
  static v sub(v a, v b) { return _mm_sub_ps(a, b); }
  static v mul(v a, v b) { return _mm_mul_ps(a, b); }
  static v div(v a, v b) { return _mm_div_ps(a, b); }
  static v max(v a, v b) { return _mm_max_ps(a, b); }
  static v min(v a, v b) { return _mm_min_ps(a, b); }
  static mask less(v a, v b) { return _mm_cmplt_ps(a, b); }
  static mask both(mask a, mask b) { return _mm_and_ps(a, b); }
  static bool all(mask k) { return _mm_movemask_ps(k) == 0xF; }
  static v select(mask k, v a, v b) { return _mm_or_ps(_mm_and_ps(k, a), _mm_andnot_ps(k, b)); }
  static v abs(v a) { return _mm_and_ps(a, _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF))); }
  static v xor_sign(v a, v s) { return _mm_xor_ps(a, _mm_and_ps(s, _mm_castsi128_ps(_mm_set1_epi32(INT32_MIN)))); }
  static void exp2_pair(v t, v base, v& s1, v& s2) {
    const __m128i n = _mm_sub_epi32(_mm_castps_si128(t), _mm_castps_si128(base));
    const __m128i n1 = _mm_srai_epi32(n, 1), n2 = _mm_sub_epi32(n, n1), bias = _mm_set1_epi32(127);
    s1 = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n1, bias), 23));
    s2 = _mm_castsi128_ps(_mm_slli_epi32(_mm_add_epi32(n2, bias), 23));
  }
  static v lookup_bf16(const float* table, v x, std::uint32_t first, std::uint32_t count, mask& found) {
    alignas(16) float xs[4], out[4];
    alignas(16) std::uint32_t in[4];
    _mm_store_ps(xs, x);
    for (int i = 0; i < 4; ++i) {
      bool f = false;
      out[i] = scalar_pack::lookup_bf16(table, xs[i], first, count, f);
      in[i] = f ? ~0u : 0u;
    }
    found = _mm_castsi128_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in)));
    return _mm_load_ps(out);
  }

 private:
#if !defined(__FMA__) && !defined(__FMA4__)
  /// fma's rare lanes: the sums of both halves rounded to odd, then to float.
  [[gnu::noinline, gnu::cold]] static v fma_rounded_to_odd(__m128d a0, __m128d b0, __m128d c0, __m128d a1, __m128d b1,
                                                           __m128d c1) {
    return _mm_movelh_ps(_mm_cvtpd_ps(fma_to_odd(a0, b0, c0)), _mm_cvtpd_ps(fma_to_odd(a1, b1, c1)));
  }

  /// a·b + c rounded to odd (two lanes of double; a, b and c floats).
  static __m128d fma_to_odd(__m128d a, __m128d b, __m128d c) {
    const __m128d p = _mm_mul_pd(a, b), s = _mm_add_pd(p, c);
    const __m128d bv = _mm_sub_pd(s, p), e = _mm_add_pd(_mm_sub_pd(p, _mm_sub_pd(s, bv)), _mm_sub_pd(c, bv));
    // (e is NaN where an operand is infinite or NaN: s is then left as it is)
    const __m128i inexact = _mm_castpd_si128(_mm_or_pd(_mm_cmplt_pd(e, _mm_setzero_pd()), _mm_cmpgt_pd(e, _mm_setzero_pd())));
    const __m128i bits = _mm_castpd_si128(s), one = _mm_set_epi32(0, 1, 0, 1);
    // where the exact sum is larger in magnitude, the odd one of s and the next: s | 1;
    // where smaller, of the previous and s: s − 1 + (s & 1)
    const __m128i away = _mm_or_si128(bits, one);
    const __m128i toward = _mm_add_epi64(_mm_sub_epi64(bits, one), _mm_and_si128(bits, one));
    const __m128i opposite = _mm_shuffle_epi32(_mm_srai_epi32(_mm_xor_si128(bits, _mm_castpd_si128(e)), 31),
                                               _MM_SHUFFLE(3, 3, 1, 1));
    const __m128i odd = _mm_or_si128(_mm_and_si128(opposite, toward), _mm_andnot_si128(opposite, away));
    return _mm_castsi128_pd(_mm_or_si128(_mm_and_si128(inexact, odd), _mm_andnot_si128(inexact, bits)));
  }
#endif
};
#endif

/// 1 in a build whose native pack would be sse2_pack with fma emulated (the
/// x86-64 baseline; g++ or clang): there a CPU with FMA runs the functions
/// on sse2_fma_pack instead, compiled for FMA (with_pack). The same bits
/// either way. (Also under -ffast-math, where libm_expf's emulation is off:
/// the instruction needs none of the emulation's exact sums.)
#if defined(__SSE2__) && !defined(__AVX512F__) && !defined(__FMA__) && !defined(__FMA4__) && defined(__GNUC__)
#define KILN_DETAIL_FMA_DISPATCH 1
#else
#define KILN_DETAIL_FMA_DISPATCH 0
#endif

#if KILN_DETAIL_FMA_DISPATCH
/// sse2_pack with the FMA instruction, for a CPU with FMA in a build that
/// does not target it: its fma is inlined only into code compiled for FMA
/// (with_pack runs it in run_compiled_for_fma, detail/cpu_features.hpp).
struct sse2_fma_pack : sse2_pack {
  [[gnu::target("fma")]] static v fma(v a, v b, v c) { return _mm_fmadd_ps(a, b, c); }
};

/// sse2_pack, telling with_pack to take sse2_fma_pack where the CPU has
/// FMA: the baseline build's native_pack.
struct sse2_native_pack : sse2_pack {};
#endif

#if defined(__AVX512F__)
using native_pack = avx512_pack;
#elif defined(__AVX2__) && defined(__FMA__)
using native_pack = avx2_pack;
#elif KILN_DETAIL_FMA_DISPATCH
using native_pack = sse2_native_pack;
#elif defined(__SSE2__)
using native_pack = sse2_pack;
#else
using native_pack = scalar_pack;
#endif

/// run(P{}): a function's loop on pack P. In a build for the x86-64
/// baseline, P = native_pack (sse2_native_pack) runs sse2_fma_pack compiled
/// for FMA on a CPU with FMA, else sse2_pack (its fma emulated): the same
/// bits.
template <class P, class Run>
void with_pack(Run&& run) {
#if KILN_DETAIL_FMA_DISPATCH
  if constexpr (std::is_same_v<P, sse2_native_pack>) {
    if (cpu_has_fma()) {
      run_compiled_for_fma(run, sse2_fma_pack{});
    } else {
      run(sse2_pack{});
    }
  } else {
    run(P{});
  }
#else
  run(P{});
#endif
}

}  // namespace kiln::detail::vmath

KILN_AVX512_END
