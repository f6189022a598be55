// kiln/detail/bf16_arrays.hpp — arrays between f32 and bf16, in one pass.
//
// What precision<bf16> converts: the parameters into the step's bf16 copy
// (once per step), a layer's f32 results into its bf16 output, and bf16
// activations back to f32 for the layers that compute in f32. Rounding is
// to nearest even with NaN kept a NaN (kiln::bf16::from); widening is exact.
// AVX512-BF16 targets round 16 values per instruction (vcvtneps2bf16, which
// rounds the same way); elsewhere the scalar conversion, which GCC vectorises.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include <kiln/bf16.hpp>
#include <kiln/detail/avx512.hpp>

KILN_AVX512_BEGIN

namespace kiln::detail {

/// out[i] = bf16(in[i] + bias) for i < n.
inline void narrow(const float* in, std::size_t n, bf16* out, float bias = 0.0f) noexcept {
  std::size_t i = 0;
#if defined(__AVX512BF16__)
  const __m512 b = _mm512_set1_ps(bias);
  for (const std::size_t whole = n - n % 16; i < whole; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_add_ps(_mm512_loadu_ps(in + i), b))));
#endif
  for (; i < n; ++i) out[i] = bf16::from(in[i] + bias);
}

/// out[i] = in[i] (exact) for i < n.
inline void widen(const bf16* in, std::size_t n, float* out) noexcept {
  std::size_t i = 0;
#if defined(__AVX512F__)
  for (const std::size_t whole = n - n % 16; i < whole; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(in[i]);
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
    std::size_t i = 0;
#if defined(__AVX512BF16__)
    for (const std::size_t whole = rows - rows % 16; i < whole; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i),
                          reinterpret_cast<__m256i>(
                              _mm512_cvtneps_pbh(_mm512_add_ps(_mm512_loadu_ps(col + i), _mm512_loadu_ps(bias + i)))));
#endif
    for (; i < rows; ++i) o[i] = bf16::from(col[i] + bias[i]);
  }
}

}  // namespace kiln::detail

KILN_AVX512_END
