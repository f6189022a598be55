// kiln/detail/unfold.hpp — the row steps of conv2d's unfold (im2col) and
// fold-back (col2im).
//
// Unfolding writes, for every kernel tap and output row, `n` values of which
// those in [first, last) come from a shifted input row and the rest are the
// zero padding; folding back sums, into each input-gradient row, the runs of
// every tap that read it. Rows are short (the output width: 14 or 28 on
// Fashion-MNIST), so the cost is in the loop overhead, not in memory: on
// AVX-512 one masked load and one masked store cover 16 of them (8 on AVX2),
// and the lanes outside the window are neither read nor written (masked-off
// lanes cannot fault).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <kiln/detail/avx2.hpp>
#include <kiln/detail/avx512.hpp>

#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <emmintrin.h>
#endif

KILN_AVX512_BEGIN

namespace kiln::detail {

#if defined(__AVX2__) && !defined(__AVX512F__)
#define KILN_UNFOLD_AVX2 1
/// Lanes [lo, hi) of 8, as an AVX2 mask (both bounds clamped to [0, 8]).
inline __m256i lanes8(std::ptrdiff_t lo, std::ptrdiff_t hi) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const auto clamp = [](std::ptrdiff_t v) { return static_cast<int>(std::clamp<std::ptrdiff_t>(v, 0, 8)); };
  // index ≥ lo and index < hi
  return _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(clamp(lo)), index),
                             _mm256_cmpgt_epi32(_mm256_set1_epi32(clamp(hi)), index));
}
#endif

/// out[j] = j in [first, last) ? row[j + shift] : 0, for j in [0, n); only
/// row[first + shift … last + shift) is read. out[n … room) may be written
/// too (with anything): where the caller writes them afterwards anyway (the
/// unfold's next rows), whole vectors are stored there instead of masked
/// ones, which are slow on AMD's cores.
template <class T>
inline void copy_window(const T* row, std::ptrdiff_t shift, std::ptrdiff_t first, std::ptrdiff_t last, std::ptrdiff_t n,
                        T* out, std::ptrdiff_t room) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    // (the address of element j = 0 is formed as an integer: it may lie before the row)
    const auto base = reinterpret_cast<std::uintptr_t>(row) + static_cast<std::uintptr_t>(shift) * sizeof(float);
    for (std::ptrdiff_t j = 0; j < n; j += 16) {
      const __mmask16 inside = avx512::lanes(first - j, last - j), kept = avx512::lanes(n - j);
      const __m512 v = _mm512_maskz_loadu_ps(
          inside, reinterpret_cast<const void*>(base + static_cast<std::uintptr_t>(j) * sizeof(float)));
      if (j + 16 <= room) {
        _mm512_storeu_ps(out + j, v);
      } else {
        _mm512_mask_storeu_ps(out + j, kept, v);
      }
    }
    return;
  }
#elif defined(KILN_UNFOLD_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    const auto base = reinterpret_cast<std::uintptr_t>(row) + static_cast<std::uintptr_t>(shift) * sizeof(float);
    for (std::ptrdiff_t j = 0; j < n; j += 8) {
      const __m256 v = _mm256_maskload_ps(
          reinterpret_cast<const float*>(base + static_cast<std::uintptr_t>(j) * sizeof(float)),
          lanes8(first - j, last - j));
      avx2::store_first(out + j, v, room - j >= 8 ? 8 : n - j);
    }
    return;
  }
#endif
#if defined(__AVX512BW__)
  if constexpr (sizeof(T) == 2) {  // bf16 activations: 32 values per masked instruction
    const auto base = reinterpret_cast<std::uintptr_t>(row) + static_cast<std::uintptr_t>(shift) * sizeof(T);
    for (std::ptrdiff_t j = 0; j < n; j += 32) {
      const __mmask32 inside = avx512::lanes32(first - j, last - j), kept = avx512::lanes32(0, n - j);
      const __m512i v = _mm512_maskz_loadu_epi16(
          inside, reinterpret_cast<const void*>(base + static_cast<std::uintptr_t>(j) * sizeof(T)));
      if (j + 32 <= room) {
        _mm512_storeu_si512(out + j, v);
      } else {
        _mm512_mask_storeu_epi16(out + j, kept, v);
      }
    }
    return;
  }
#endif
  (void)room;  // (the copies below write [0, n) only)
  first = std::clamp<std::ptrdiff_t>(first, 0, n);  // (the window may lie wholly outside [0, n))
  last = std::clamp(last, first, n);
#if !defined(__AVX512BW__) && defined(__SSE2__)
  if constexpr (sizeof(T) == 2 && std::is_trivially_copyable_v<T>) {
    // bf16 activations without AVX-512BW: 8 values per 16-byte move, and
    // the last 8 of a run moved again, overlapping, instead of a call to
    // memmove / memset per row (as long as the rows). Only the window is
    // read: every load lies inside [first, last). (The padding is stored as
    // all-zero bits: T{} for kiln::bf16, +0.)
    if (n >= 8 && last - first >= 8 && first <= 8 && n - last <= 8) {  // (padding of at most 8 a side)
      const auto move8 = [](const T* from, T* to) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(to), _mm_loadu_si128(reinterpret_cast<const __m128i*>(from)));
      };
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_setzero_si128());  // the padding, before the window
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + n - 8), _mm_setzero_si128());  // and after it
      const T* from = row + first + shift;
      T* to = out + first;
      const std::ptrdiff_t count = last - first;
      for (std::ptrdiff_t k = 0; k + 8 <= count; k += 8) move8(from + k, to + k);
      if (count % 8 != 0) move8(from + count - 8, to + count - 8);
      return;
    }
  }
#endif
  std::fill(out, out + first, T{});
  std::copy(row + first + shift, row + last + shift, out + first);
  std::fill(out + last, out + n, T{});
}

#if defined(__AVX512F__) || defined(KILN_UNFOLD_AVX2)
#define KILN_DETAIL_GATHER_TAPS 1
/// out[q] = Σ_t in_t[q − shift_t] over the taps t whose window
/// [first_t, last_t) holds q − shift_t, for q in [0, n): the fold-back of
/// one row, gathered (each input run read once, the row written once).
/// Pushing each tap's run into the row in turn instead reads back what the
/// previous tap just stored one float away, which stalls store forwarding.
struct tap_run {
  const float* in;
  std::ptrdiff_t shift, first, last;
};
/// Each lane's terms are added in tap order, starting from zero (the order
/// of the scalar fold-back, so the bits are the same on every CPU). R rows
/// at a time: row ρ reads each tap's run `in_step` floats after row 0's and
/// writes `out_step` after it; each row keeps its own chain of additions,
/// so R independent chains overlap (one chain of dependent additions per
/// row was the fold-back's limit).
template <int R>
inline void gather_tap_rows(const tap_run* taps, std::ptrdiff_t count, std::ptrdiff_t n, float* out,
                            std::ptrdiff_t in_step, std::ptrdiff_t out_step) {
#if defined(KILN_UNFOLD_AVX2)
  for (std::ptrdiff_t q = 0; q < n; q += 8) {
    __m256 acc[R];
    for (int row = 0; row < R; ++row) acc[row] = _mm256_setzero_ps();
    for (std::ptrdiff_t t = 0; t < count; ++t) {
      const tap_run& r = taps[t];
      if (r.first + r.shift - q >= 8 || r.last + r.shift - q <= 0 || r.first >= r.last) continue;
      const __m256i m = lanes8(r.first + r.shift - q, r.last + r.shift - q);
      const auto at = reinterpret_cast<std::uintptr_t>(r.in) + static_cast<std::uintptr_t>(q - r.shift) * sizeof(float);
      for (int row = 0; row < R; ++row)
        acc[row] = _mm256_add_ps(
            acc[row], _mm256_maskload_ps(reinterpret_cast<const float*>(
                                             at + static_cast<std::uintptr_t>(row * in_step) * sizeof(float)),
                                         m));
    }
    for (int row = 0; row < R; ++row) avx2::store_first(out + row * out_step + q, acc[row], n - q);
  }
#else
  for (std::ptrdiff_t q = 0; q < n; q += 16) {
    __m512 acc[R];
    for (int row = 0; row < R; ++row) acc[row] = _mm512_setzero_ps();
    for (std::ptrdiff_t t = 0; t < count; ++t) {
      const tap_run& r = taps[t];
      // lanes q + l with q + l − shift in [first, last)
      const __mmask16 m = avx512::lanes(r.first + r.shift - q, r.last + r.shift - q);
      if (m == 0) continue;
      const auto at = reinterpret_cast<std::uintptr_t>(r.in) + static_cast<std::uintptr_t>(q - r.shift) * sizeof(float);
      for (int row = 0; row < R; ++row)
        acc[row] = _mm512_add_ps(
            acc[row], _mm512_maskz_loadu_ps(m, reinterpret_cast<const void*>(
                                                   at + static_cast<std::uintptr_t>(row * in_step) * sizeof(float))));
    }
    for (int row = 0; row < R; ++row) _mm512_mask_storeu_ps(out + row * out_step + q, avx512::lanes(n - q), acc[row]);
  }
#endif
}
/// gather_tap_rows for 1 to 4 rows (`rows` at run time).
inline void gather_taps(const tap_run* taps, std::ptrdiff_t count, std::ptrdiff_t n, float* out, std::ptrdiff_t rows = 1,
                        std::ptrdiff_t in_step = 0, std::ptrdiff_t out_step = 0) {
  switch (rows) {
    case 4: gather_tap_rows<4>(taps, count, n, out, in_step, out_step); break;
    case 3: gather_tap_rows<3>(taps, count, n, out, in_step, out_step); break;
    case 2: gather_tap_rows<2>(taps, count, n, out, in_step, out_step); break;
    default: gather_tap_rows<1>(taps, count, n, out, in_step, out_step); break;
  }
}
#endif

}  // namespace kiln::detail

#undef KILN_UNFOLD_AVX2

KILN_AVX512_END
