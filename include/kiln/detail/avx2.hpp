// kiln/detail/avx2.hpp — what kiln's AVX2 kernels (detail/sgemm_avx2.hpp,
// detail/unfold.hpp, detail/pool2x2.hpp) share: a mask of the first lanes
// for masked loads, and a store of the first lanes.
#pragma once
#include <kiln/detail/internal_header.hpp>

#if defined(__AVX2__)
#include <immintrin.h>

#include <algorithm>
#include <cstddef>

namespace kiln::detail::avx2 {

/// A mask of the first n of 8 lanes (for the masked loads, which touch no
/// memory in the lanes left out).
inline __m256i first_lanes(std::ptrdiff_t n) {
  const std::ptrdiff_t kept = std::clamp<std::ptrdiff_t>(n, 0, 8);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(kept)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// out[l] = v[l] for l < count (at most 8): one plain store for a whole
/// vector, a copy for a partial one (masked stores are slow on AMD's cores).
inline void store_first(float* out, __m256 v, std::ptrdiff_t count) {
  if (count >= 8) {
    _mm256_storeu_ps(out, v);
    return;
  }
  alignas(32) float part[8];
  _mm256_store_ps(part, v);
  for (std::ptrdiff_t l = 0; l < count; ++l) out[l] = part[l];
}

}  // namespace kiln::detail::avx2

#endif  // __AVX2__
