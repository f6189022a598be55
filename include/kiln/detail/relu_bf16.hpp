// kiln/detail/relu_bf16.hpp — relu on bf16 activations, on their bits.
//
// relu's output is its input or zero, so a bf16 input needs no arithmetic:
// widening it, taking max(x, 0) in f32 and rounding back (what an
// element-wise layer does with bf16 activations) gives back the input's
// own bits or zero. These read and write the 16-bit values directly:
//
//   relu(x) = +0 for x < 0, x otherwise (−0 and +0 kept, +∞ kept),
//             x made quiet (bit 6 of its payload set) for a NaN,
//   relu′ from the output y: dy where y > 0, +0 elsewhere (NaN included).
//
// These are the bits of the f32 route through kiln::bf16::from. (Built for
// a target with AVX512-BF16, the f32 route's rounding flushed a positive
// subnormal input, below 2⁻¹²⁶, to +0; here it is kept, as elsewhere.)
// AVX-512 targets with BW and VL do 16 or 32 values at a time, and relu
// layers use these there (relu_bf16_in_vectors); elsewhere these go one
// value at a time, which GCC does not vectorise at -O2, so relu layers keep
// the element-wise route, whose widening and rounding are vectorised.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>
#include <cstdint>

#include <kiln/bf16.hpp>
#include <kiln/detail/avx512.hpp>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define KILN_RELU_BF16_VECTORS 1
#include <immintrin.h>
#endif

KILN_AVX512_BEGIN

namespace kiln::detail {

/// True where relu_bf16 and relu_bf16_backward run on vectors.
inline constexpr bool relu_bf16_in_vectors =
#if defined(KILN_RELU_BF16_VECTORS)
    true;
#else
    false;
#endif

/// relu of one bf16 value's bits.
constexpr std::uint16_t relu_bits(std::uint16_t b) noexcept {
  const bool nan = (b & 0x7FFFu) > 0x7F80u;
  if (nan) return static_cast<std::uint16_t>(b | 0x0040u);
  return b > 0x8000u ? std::uint16_t{0} : b;  // negative and not −0: +0
}
/// True when the bf16 value with these bits is > 0.
constexpr bool positive_bits(std::uint16_t b) noexcept { return b != 0 && b <= 0x7F80u; }

#if defined(KILN_RELU_BF16_VECTORS)
/// relu_bits of the 32 values in v.
inline __m512i relu_bits(__m512i v) noexcept {
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(_mm512_and_si512(v, _mm512_set1_epi16(0x7FFF)),
                                                _mm512_set1_epi16(0x7F80));
  const __mmask32 negative = _mm512_cmpgt_epu16_mask(v, _mm512_set1_epi16(static_cast<short>(0x8000)));
  const __m512i kept = _mm512_maskz_mov_epi16(~negative, v);  // below −0: +0 (a negative NaN too, until…)
  return _mm512_mask_mov_epi16(kept, nan, _mm512_or_si512(v, _mm512_set1_epi16(0x0040)));  // …NaN: quiet
}
#endif

/// y[i] = relu(x[i]) for i < n.
inline void relu_bf16(const bf16* x, std::size_t n, bf16* y) noexcept {
  std::size_t i = 0;
#if defined(KILN_RELU_BF16_VECTORS)
  for (const std::size_t whole = n - n % 32; i < whole; i += 32)
    _mm512_storeu_si512(y + i, relu_bits(_mm512_loadu_si512(x + i)));
  if (i < n) {
    const __mmask32 m = avx512::lanes32(0, static_cast<std::ptrdiff_t>(n - i));
    _mm512_mask_storeu_epi16(y + i, m, relu_bits(_mm512_maskz_loadu_epi16(m, x + i)));
    return;
  }
#endif
  for (; i < n; ++i) y[i].bits = relu_bits(x[i].bits);
}

/// dx[i] = dy[i] where y[i] > 0, +0 elsewhere, for i < n.
inline void relu_bf16_backward(const bf16* y, const float* dy, std::size_t n, float* dx) noexcept {
  std::size_t i = 0;
#if defined(KILN_RELU_BF16_VECTORS)
  // (as 32-bit lanes: 0 < b ≤ 0x7F80 is > 0; NaN and every negative value are not)
  const auto positive = [](__m256i bits, __mmask16 m) {
    const __m512i b = _mm512_cvtepu16_epi32(bits);
    return static_cast<__mmask16>(_mm512_mask_cmpgt_epi32_mask(m, b, _mm512_setzero_si512()) &
                                  _mm512_cmple_epi32_mask(b, _mm512_set1_epi32(0x7F80)));
  };
  for (const std::size_t whole = n - n % 16; i < whole; i += 16) {
    const __mmask16 p = positive(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i)), 0xFFFF);
    _mm512_storeu_ps(dx + i, _mm512_maskz_loadu_ps(p, dy + i));
  }
  if (i < n) {
    const __mmask16 m = avx512::lanes(static_cast<std::ptrdiff_t>(n - i));
    _mm512_mask_storeu_ps(dx + i, m, _mm512_maskz_loadu_ps(positive(_mm256_maskz_loadu_epi16(m, y + i), m), dy + i));
    return;
  }
#endif
  for (; i < n; ++i) dx[i] = positive_bits(y[i].bits) ? dy[i] : 0.0f;
}

}  // namespace kiln::detail

#undef KILN_RELU_BF16_VECTORS

KILN_AVX512_END
