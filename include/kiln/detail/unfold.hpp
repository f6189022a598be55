// kiln/detail/unfold.hpp — the row steps of conv2d's unfold (im2col) and
// fold-back (col2im).
//
// Unfolding writes, for every kernel tap and output row, `n` values of which
// those in [first, last) come from a shifted input row and the rest are the
// zero padding; folding back sums, into each input-gradient row, the runs of
// every tap that read it. Rows are short (the output width: 14 or 28 on
// Fashion-MNIST), so the cost is in the loop overhead, not in memory: on
// AVX-512 one masked load and one masked store cover 16 of them, and the
// lanes outside the window are neither read nor written (masked-off lanes
// cannot fault).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <kiln/detail/avx512.hpp>

KILN_AVX512_BEGIN

namespace kiln::detail {

/// out[j] = j in [first, last) ? row[j + shift] : 0, for j in [0, n); only
/// row[first + shift … last + shift) is read.
template <class T>
inline void copy_window(const T* row, std::ptrdiff_t shift, std::ptrdiff_t first, std::ptrdiff_t last, std::ptrdiff_t n,
                        T* out) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    // (the address of element j = 0 is formed as an integer: it may lie before the row)
    const auto base = reinterpret_cast<std::uintptr_t>(row) + static_cast<std::uintptr_t>(shift) * sizeof(float);
    for (std::ptrdiff_t j = 0; j < n; j += 16) {
      const __mmask16 inside = avx512::lanes(first - j, last - j), kept = avx512::lanes(n - j);
      const __m512 v = _mm512_maskz_loadu_ps(
          inside, reinterpret_cast<const void*>(base + static_cast<std::uintptr_t>(j) * sizeof(float)));
      _mm512_mask_storeu_ps(out + j, kept, v);
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
      _mm512_mask_storeu_epi16(out + j, kept, v);
    }
    return;
  }
#endif
  first = std::clamp<std::ptrdiff_t>(first, 0, n);  // (the window may lie wholly outside [0, n))
  last = std::clamp(last, first, n);
  std::ptrdiff_t j = 0;
  for (; j < first; ++j) out[j] = T{};
  for (; j < last; ++j) out[j] = row[j + shift];
  for (; j < n; ++j) out[j] = T{};
}

#if defined(__AVX512F__)
/// out[q] = Σ_t in_t[q − shift_t] over the taps t whose window
/// [first_t, last_t) holds q − shift_t, for q in [0, n): the fold-back of
/// one row, gathered (each input run read once, the row written once).
/// Pushing each tap's run into the row in turn instead reads back what the
/// previous tap just stored one float away, which stalls store forwarding.
struct tap_run {
  const float* in;
  std::ptrdiff_t shift, first, last;
};
inline void gather_taps(const tap_run* taps, std::ptrdiff_t count, std::ptrdiff_t n, float* out) {
  for (std::ptrdiff_t q = 0; q < n; q += 16) {
    __m512 acc = _mm512_setzero_ps();
    for (std::ptrdiff_t t = 0; t < count; ++t) {
      const tap_run& r = taps[t];
      // lanes q + l with q + l − shift in [first, last)
      const __mmask16 m = avx512::lanes(r.first + r.shift - q, r.last + r.shift - q);
      if (m == 0) continue;
      const auto at = reinterpret_cast<std::uintptr_t>(r.in) + static_cast<std::uintptr_t>(q - r.shift) * sizeof(float);
      acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(m, reinterpret_cast<const void*>(at)));
    }
    _mm512_mask_storeu_ps(out + q, avx512::lanes(n - q), acc);
  }
}
#endif

}  // namespace kiln::detail

KILN_AVX512_END
