// kiln/detail/pool2x2.hpp — 2 × 2, stride-2 pooling of float planes with
// AVX-512 or AVX2, the case every small CNN uses (max_pool<2>, avg_pool<2>).
//
// 16 input columns of a pair of rows (one zmm, or two ymm) are 8 windows:
// the two rows are combined lane by lane, then even and odd lanes are
// combined after a permute. The results are those of the layer's plain
// loops (kiln/layers/pool.hpp): max_pool's NaN propagates (a window holding
// a NaN gives NaN), its gradient goes to the window's first maximum in
// row-major order (a maximum of zero may differ in sign: +0 and −0 compare
// equal), and avg_pool's sums differ from the loop's only in the order of
// two additions. Both vector widths compute the same operations in the
// same order: the same bits.
#pragma once
#include <kiln/detail/internal_header.hpp>

#if !defined(__AVX512F__) && defined(__AVX2__)
#define KILN_DETAIL_POOL2X2_AVX2 1
#include <algorithm>
#include <cstddef>

#include <kiln/detail/avx2.hpp>

namespace kiln::detail::avx2 {

/// max(a, b) lane by lane, a on a tie, NaN if either is NaN.
inline __m256 max_nan(__m256 a, __m256 b) {
  // (vmaxps returns its second operand unless the first is greater; a + b is NaN where either is)
  return _mm256_blendv_ps(_mm256_max_ps(b, a), _mm256_add_ps(a, b), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}

/// The window's left columns (even) or right ones (odd) of 16 columns in
/// two vectors, in order.
template <bool Odd>
inline __m256 columns_of_windows(__m256 low, __m256 high) {
  constexpr int pick = Odd ? _MM_SHUFFLE(3, 1, 3, 1) : _MM_SHUFFLE(2, 0, 2, 0);
  // (the shuffle interleaves the halves' pairs within each 128-bit lane; the permute puts them in order)
  return _mm256_castpd_ps(
      _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(low, high, pick)), _MM_SHUFFLE(3, 1, 2, 0)));
}

/// Columns [0, n) of a row from p as two vectors (zero past n ≤ 16; nothing read there).
inline void load_16(const float* p, std::ptrdiff_t n, __m256& low, __m256& high) {
  if (n >= 16) {
    low = _mm256_loadu_ps(p), high = _mm256_loadu_ps(p + 8);
  } else {
    low = _mm256_maskload_ps(p, first_lanes(n));
    high = n > 8 ? _mm256_maskload_ps(p + 8, first_lanes(n - 8)) : _mm256_setzero_ps();
  }
}

/// Lanes as a vector mask, from the bits of an 8-lane mask.
inline __m256 mask_of(unsigned bits) {
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  return _mm256_castsi256_ps(
      _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(bits)), bit), bit));
}

/// y (h/2 × w/2) = 2 × 2 max (or mean) of x (h × w), floor on odd extents.
template <bool Max>
inline void pool2x2_forward(const float* x, std::ptrdiff_t h, std::ptrdiff_t w, float* y) {
  const std::ptrdiff_t ho = h / 2, wo = w / 2;
  for (std::ptrdiff_t i = 0; i < ho; ++i) {
    const float* r0 = x + 2 * i * w;
    const float* r1 = r0 + w;
    for (std::ptrdiff_t j = 0; j < wo; j += 8) {
      const std::ptrdiff_t n = std::min<std::ptrdiff_t>(8, wo - j);
      __m256 a0, a1, b0, b1;
      load_16(r0 + 2 * j, 2 * n, a0, a1);
      load_16(r1 + 2 * j, 2 * n, b0, b1);
      const __m256 v0 = Max ? max_nan(a0, b0) : _mm256_add_ps(a0, b0), v1 = Max ? max_nan(a1, b1) : _mm256_add_ps(a1, b1);
      const __m256 left = columns_of_windows<false>(v0, v1), right = columns_of_windows<true>(v0, v1);
      store_first(y + i * wo + j,
                  Max ? max_nan(left, right) : _mm256_mul_ps(_mm256_add_ps(left, right), _mm256_set1_ps(0.25f)), n);
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
  // lanes 2k and 2k + 1 both take window k's value
  const __m256i twice = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  constexpr unsigned left_lanes = 0x55, right_lanes = 0xAA;
  for (std::ptrdiff_t i = 0; i < ho; ++i) {
    const float* r0 = x + 2 * i * w;
    const float* r1 = r0 + w;
    float* d0 = dx + 2 * i * w;
    float* d1 = d0 + w;
    for (std::ptrdiff_t j = 0; j < wo; j += 4) {  // (4 windows: 8 columns)
      const std::ptrdiff_t n = std::min<std::ptrdiff_t>(4, wo - j);
      const __m256i in = first_lanes(2 * n), out = first_lanes(n);
      const __m256 g = _mm256_permutevar8x32_ps(_mm256_maskload_ps(dy + i * wo + j, out), twice);
      if constexpr (Max) {
        const __m256 m = _mm256_permutevar8x32_ps(_mm256_maskload_ps(y + i * wo + j, out), twice);
        const unsigned valid = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(in)));
        const unsigned e0 = valid & static_cast<unsigned>(_mm256_movemask_ps(
                                        _mm256_cmp_ps(_mm256_maskload_ps(r0 + 2 * j, in), m, _CMP_EQ_OQ)));
        const unsigned e1 = valid & static_cast<unsigned>(_mm256_movemask_ps(
                                        _mm256_cmp_ps(_mm256_maskload_ps(r1 + 2 * j, in), m, _CMP_EQ_OQ)));
        // the first maximum in the order (0,0), (0,1), (1,0), (1,1); `taken` marks windows on their left lane
        const unsigned t00 = e0 & left_lanes, t01 = e0 & right_lanes & ~(t00 << 1);
        unsigned taken = t00 | (t01 >> 1);
        const unsigned t10 = e1 & left_lanes & ~taken;
        taken |= t10;
        const unsigned t11 = e1 & right_lanes & ~(taken << 1);
        store_first(d0 + 2 * j, _mm256_and_ps(mask_of(t00 | t01), g), 2 * n);
        store_first(d1 + 2 * j, _mm256_and_ps(mask_of(t10 | t11), g), 2 * n);
      } else {
        const __m256 share = _mm256_mul_ps(g, _mm256_set1_ps(0.25f));
        store_first(d0 + 2 * j, share, 2 * n);
        store_first(d1 + 2 * j, share, 2 * n);
      }
    }
  }
}

}  // namespace kiln::detail::avx2

#endif  // AVX2 without AVX-512

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

#if defined(__AVX512F__) || defined(KILN_DETAIL_POOL2X2_AVX2)
namespace kiln::detail {
/// The 2 × 2 pooling kernels of the widest vectors the target has.
#if defined(__AVX512F__)
namespace pool_kernels = avx512;
#else
namespace pool_kernels = avx2;
#endif
}  // namespace kiln::detail
#endif
