// kiln/detail/bf16_arrays.hpp — arrays between f32 and bf16, in one pass.
//
// What precision<bf16> converts: the parameters into the step's bf16 copy
// (once per step), a layer's f32 results into its bf16 output, and bf16
// activations back to f32 for the layers that compute in f32. Rounding is
// to nearest even with NaN kept a NaN (kiln::bf16::from); widening is exact.
// AVX512-BF16 targets round 16 values per instruction (vcvtneps2bf16, which
// rounds the same way, except that it flushes subnormal inputs, below
// 2⁻¹²⁶ ≈ 1.2e-38 in magnitude, to zero; every element of an array, tail
// included, is rounded by it there); other AVX-512 targets (F and BW) round
// 16 at a time with integer arithmetic, bit for bit as kiln::bf16::from,
// AVX2 targets without AVX-512 8 at a time; elsewhere (AVX-512F without BW
// included) the scalar conversion.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <kiln/bf16.hpp>
#include <kiln/detail/avx512.hpp>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

KILN_AVX512_BEGIN

namespace kiln::detail {

/// An activation as arithmetic sees it: a bf16 widened to f32, anything
/// else as it is.
constexpr float value_of(bf16 v) noexcept { return static_cast<float>(v); }
constexpr float value_of(float v) noexcept { return v; }
constexpr double value_of(double v) noexcept { return v; }
/// An f32 operand of a bf16 product seen as a type of its own, so that a
/// GEMM kernel's packing reads it through load overloads that round each
/// value to bf16 (CPUs without AVX512-BF16: round or widen while packing,
/// then f32 FMAs). Its pointers address floats; it is never itself read.
struct bf16_rounded_f32 {
  float storage;
};
/// How such packing reads an operand: bf16 as it is (widened exactly), f32
/// rounded to bf16.
inline const bf16* as_bf16_values(const bf16* p) noexcept { return p; }
inline const bf16_rounded_f32* as_bf16_values(const float* p) noexcept {
  return reinterpret_cast<const bf16_rounded_f32*>(p);
}

/// An f32 operand of a bf16 product whose values are bf16 values already
/// (the caller rounded them, kiln::round_to_bf16), seen as a type of its
/// own so that gemm_scratch::run does not round it again into a copy; to
/// every other reader it is the f32 it holds (rounding it would change
/// nothing). Its pointers address floats; it is never itself read.
struct f32_of_bf16_values {
  float storage;
};
inline const f32_of_bf16_values* as_rounded_operand(const float* p) noexcept {
  return reinterpret_cast<const f32_of_bf16_values*>(p);
}
/// The floats such an operand holds (any other operand as it is).
inline const float* plain_operand(const f32_of_bf16_values* p) noexcept { return reinterpret_cast<const float*>(p); }
template <class S>
const S* plain_operand(const S* p) noexcept {
  return p;
}

/// A result stored as an activation of type A (rounded to nearest even into bf16).
template <class A, class T>
constexpr A stored_as(T v) noexcept {
  if constexpr (std::is_same_v<A, bf16>) {
    return bf16::from(static_cast<float>(v));
  } else {
    return static_cast<A>(v);
  }
}

#if defined(__AVX512F__)
/// Each lane of v rounded to bf16 exactly as kiln::bf16::from (nearest,
/// ties to even; a NaN stays a NaN, made quiet; subnormals kept): the bf16
/// bits in the low half of each 32-bit lane.
inline __m512i bf16_bits_of(__m512 v) noexcept {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i rounding = _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), _mm512_and_si512(high, _mm512_set1_epi32(1)));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, rounding), 16);
  const __mmask16 nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  return _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x0040));
}
/// Each lane of v rounded to the nearest bf16 value (bf16_bits_of), as an f32.
inline __m512 bf16_values_of(__m512 v) noexcept { return _mm512_castsi512_ps(_mm512_slli_epi32(bf16_bits_of(v), 16)); }
#endif

#if defined(__AVX2__)
/// The same rounding, 8 lanes at a time (AVX2).
inline __m256i bf16_bits_of(__m256 v) noexcept {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i rounding = _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), _mm256_and_si256(high, _mm256_set1_epi32(1)));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, rounding), 16);
  // (both sides below 2³¹: a signed comparison)
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(rounded, _mm256_or_si256(high, _mm256_set1_epi32(0x0040)), nan);
}
inline __m256 bf16_values_of(__m256 v) noexcept { return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_bits_of(v), 16)); }
#endif

#if !defined(__AVX512F__) && defined(__AVX2__)
#define KILN_NARROW8 1
/// out[l] = bf16(in[l] + bias[l]) for 8 lanes.
inline void narrow8(const float* in, __m256 bias, bf16* out) noexcept {
  const __m256i bits = bf16_bits_of(_mm256_add_ps(_mm256_loadu_ps(in), bias));
  // (every lane below 2¹⁶: packing with unsigned saturation keeps it exactly)
  const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
}
#endif

#if defined(__AVX512BF16__) || (defined(__AVX512F__) && defined(__AVX512BW__))
#define KILN_NARROW16 1
/// The 16 lanes of sum rounded to bf16, in the 16-bit lanes of the result.
inline __m256i rounded16(__m512 sum) noexcept {
#if defined(__AVX512BF16__)
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(sum));
#else
  return _mm512_cvtepi32_epi16(bf16_bits_of(sum));
#endif
}
/// out[l] = bf16(in[l] + bias[l]) for the 16 lanes.
inline void narrow16(const float* in, __m512 bias, bf16* out) noexcept {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), rounded16(_mm512_add_ps(_mm512_loadu_ps(in), bias)));
}
/// The same for the `count` (< 16) first lanes.
inline void narrow16(const float* in, __m512 bias, std::size_t count, bf16* out) noexcept {
  const __mmask16 m = avx512::lanes(static_cast<std::ptrdiff_t>(count));
  const __m512 sum = _mm512_add_ps(_mm512_maskz_loadu_ps(m, in), bias);
  _mm512_mask_storeu_epi16(out, static_cast<__mmask32>(m), _mm512_castsi256_si512(rounded16(sum)));  // (AVX-512BW)
}
#endif

/// out[i] = bf16(in[i] + bias) for i < n. (Without a bias, −0: x + −0 is
/// x for every x, −0 included, where + 0 would make −0 a +0.)
inline void narrow(const float* in, std::size_t n, bf16* out, float bias = -0.0f) noexcept {
#if defined(KILN_NARROW16)
  // (whole vectors unmasked, the tail masked: with a mask made and a masked
  // store per vector the loop took ≈ 1.7× as long)
  const __m512 b = _mm512_set1_ps(bias);
  std::size_t i = 0;
  for (const std::size_t whole = n - n % 16; i < whole; i += 16) narrow16(in + i, b, out + i);
  if (i < n) narrow16(in + i, b, n - i, out + i);
#elif defined(KILN_NARROW8)
  const __m256 b = _mm256_set1_ps(bias);
  const std::size_t whole = n - n % 8;
  for (std::size_t i = 0; i < whole; i += 8) narrow8(in + i, b, out + i);
  for (std::size_t i = whole; i < n; ++i) out[i] = bf16::from(in[i] + bias);
#else
  for (std::size_t i = 0; i < n; ++i) out[i] = bf16::from(in[i] + bias);
#endif
}

/// out[i] = in[i] (exact) for i < n.
inline void widen(const bf16* in, std::size_t n, float* out) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (const std::size_t whole = n - n % 16; i < whole; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
#elif defined(__AVX2__)
  for (const std::size_t whole = n - n % 8; i < whole; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]);
}

/// out[i] = in[i] rounded to the nearest bf16 value (kiln::round_to_bf16),
/// kept as an f32, for i < n.
inline void round_values(const float* in, std::size_t n, float* out) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (const std::size_t whole = n - n % 16; i < whole; i += 16)
    _mm512_storeu_ps(out + i, bf16_values_of(_mm512_loadu_ps(in + i)));
#elif defined(__AVX2__)
  for (const std::size_t whole = n - n % 8; i < whole; i += 8)
    _mm256_storeu_ps(out + i, bf16_values_of(_mm256_loadu_ps(in + i)));
#endif
  for (; i < n; ++i) out[i] = round_to_bf16(in[i]);
}

/// A column-major rows × cols f32 matrix plus a per-row bias (may be null),
/// rounded into bf16: out[i + j·rows] = bf16(in[i + j·rows] + bias[i]).
inline void narrow_columns(const float* in, std::size_t rows, std::size_t cols, const float* bias, bf16* out) noexcept {
  for (std::size_t j = 0; j < cols; ++j) {
    const float* col = in + j * rows;
    bf16* o = out + j * rows;
    if (!bias) {
      narrow(col, rows, o);
      continue;
    }
#if defined(KILN_NARROW16)
    std::size_t i = 0;
    for (const std::size_t whole = rows - rows % 16; i < whole; i += 16)
      narrow16(col + i, _mm512_loadu_ps(bias + i), o + i);
    if (i < rows) {
      const std::size_t count = rows - i;
      narrow16(col + i, _mm512_maskz_loadu_ps(avx512::lanes(static_cast<std::ptrdiff_t>(count)), bias + i), count,
               o + i);
    }
#elif defined(KILN_NARROW8)
    const std::size_t whole = rows - rows % 8;
    for (std::size_t i = 0; i < whole; i += 8) narrow8(col + i, _mm256_loadu_ps(bias + i), o + i);
    for (std::size_t i = whole; i < rows; ++i) o[i] = bf16::from(col[i] + bias[i]);
#else
    for (std::size_t i = 0; i < rows; ++i) o[i] = bf16::from(col[i] + bias[i]);
#endif
  }
}

}  // namespace kiln::detail

#undef KILN_NARROW16
#undef KILN_NARROW8

KILN_AVX512_END
