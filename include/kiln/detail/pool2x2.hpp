// kiln/detail/pool2x2.hpp — 2 × 2, stride-2 pooling of float planes with
// AVX-512, the case every small CNN uses (max_pool<2>, avg_pool<2>).
//
// One zmm holds 16 input columns, i.e. 8 windows of a pair of rows: the two
// rows are combined lane by lane, then even and odd lanes are combined by a
// permute. The results are those of the layer's plain loops (kiln/layers/
// pool.hpp): max_pool's NaN propagates (a window holding a NaN gives NaN),
// its gradient goes to the window's first maximum in row-major order (a
// maximum of zero may differ in sign: +0 and −0 compare equal), and
// avg_pool's sums differ from the loop's only in the order of two additions.
#pragma once
#include <kiln/detail/internal_header.hpp>

#if defined(__AVX512F__)

#include <algorithm>
#include <cstddef>

#include <kiln/detail/avx512.hpp>

KILN_AVX512_BEGIN

namespace kiln::detail::avx512 {

/// max(a, b) lane by lane, a on a tie, NaN if either is NaN.
inline __m512 max_nan(__m512 a, __m512 b) {
  const __mmask16 nan = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
  // (vmaxps returns its second operand unless the first is greater)
  return _mm512_mask_add_ps(_mm512_max_ps(b, a), nan, a, b);  // a + b is NaN where either is
}

/// y (h/2 × w/2) = 2 × 2 max (or mean) of x (h × w), floor on odd extents.
template <bool Max>
inline void pool2x2_forward(const float* x, std::ptrdiff_t h, std::ptrdiff_t w, float* y) {
  const std::ptrdiff_t ho = h / 2, wo = w / 2;
  const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  for (std::ptrdiff_t i = 0; i < ho; ++i) {
    const float* r0 = x + 2 * i * w;
    const float* r1 = r0 + w;
    for (std::ptrdiff_t j = 0; j < wo; j += 8) {
      const std::ptrdiff_t n = std::min<std::ptrdiff_t>(8, wo - j);
      const __mmask16 in = lanes(2 * n);
      const __m512 a = _mm512_maskz_loadu_ps(in, r0 + 2 * j), b = _mm512_maskz_loadu_ps(in, r1 + 2 * j);
      const __m512 v = Max ? max_nan(a, b) : _mm512_add_ps(a, b);
      // even lanes are the windows' left columns, odd lanes their right ones (lanes 8…15 unused)
      const __m512 left = _mm512_permutexvar_ps(even, v), right = _mm512_permutexvar_ps(odd, v);
      const __m512 out = Max ? max_nan(left, right) : _mm512_mul_ps(_mm512_add_ps(left, right), _mm512_set1_ps(0.25f));
      _mm512_mask_storeu_ps(y + i * wo + j, lanes(n), out);
    }
  }
}

/// dx (h × w) = the gradient of pool2x2_forward given x, its output y and
/// dy; every element of dx is written (those outside all windows are zero).
template <bool Max>
inline void pool2x2_backward(const float* x, const float* y, const float* dy, std::ptrdiff_t h, std::ptrdiff_t w,
                             float* dx) {
  const std::ptrdiff_t ho = h / 2, wo = w / 2;
  if (h % 2 != 0 || w % 2 != 0) std::fill_n(dx, h * w, 0.0f);
  // lane 2k and 2k + 1 both take window k's value
  const __m512i twice = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  constexpr __mmask16 left_lanes = 0x5555, right_lanes = 0xAAAA;
  for (std::ptrdiff_t i = 0; i < ho; ++i) {
    const float* r0 = x + 2 * i * w;
    const float* r1 = r0 + w;
    float* d0 = dx + 2 * i * w;
    float* d1 = d0 + w;
    for (std::ptrdiff_t j = 0; j < wo; j += 8) {
      const std::ptrdiff_t n = std::min<std::ptrdiff_t>(8, wo - j);
      const __mmask16 in = lanes(2 * n), out = lanes(n);
      const __m512 g = _mm512_permutexvar_ps(twice, _mm512_maskz_loadu_ps(out, dy + i * wo + j));
      if constexpr (Max) {
        const __m512 m = _mm512_permutexvar_ps(twice, _mm512_maskz_loadu_ps(out, y + i * wo + j));
        const __mmask16 e0 = _mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, r0 + 2 * j), m, _CMP_EQ_OQ);
        const __mmask16 e1 = _mm512_mask_cmp_ps_mask(in, _mm512_maskz_loadu_ps(in, r1 + 2 * j), m, _CMP_EQ_OQ);
        // the first maximum in the order (0,0), (0,1), (1,0), (1,1); `taken` marks windows on their left lane
        const auto t00 = static_cast<__mmask16>(e0 & left_lanes);
        const auto t01 = static_cast<__mmask16>(e0 & right_lanes & ~(t00 << 1));
        auto taken = static_cast<__mmask16>(t00 | (t01 >> 1));
        const auto t10 = static_cast<__mmask16>(e1 & left_lanes & ~taken);
        taken = static_cast<__mmask16>(taken | t10);
        const auto t11 = static_cast<__mmask16>(e1 & right_lanes & ~(taken << 1));
        _mm512_mask_storeu_ps(d0 + 2 * j, in, _mm512_maskz_mov_ps(static_cast<__mmask16>(t00 | t01), g));
        _mm512_mask_storeu_ps(d1 + 2 * j, in, _mm512_maskz_mov_ps(static_cast<__mmask16>(t10 | t11), g));
      } else {
        const __m512 share = _mm512_mul_ps(g, _mm512_set1_ps(0.25f));
        _mm512_mask_storeu_ps(d0 + 2 * j, in, share);
        _mm512_mask_storeu_ps(d1 + 2 * j, in, share);
      }
    }
  }
}

}  // namespace kiln::detail::avx512

KILN_AVX512_END

#endif  // __AVX512F__
