// kiln/detail/avx512.hpp — what kiln's AVX-512 kernels share: the
// intrinsics, lane masks, and a pair of macros around each kernel header's body.
//
// GCC 12 reports its own AVX-512 intrinsics (`__Y = __Y` in the unpack,
// permute and masked-load helpers) as used uninitialized once they are
// inlined (GCC bug 105593): the warning is about GCC's header, not kiln's
// code, and users compiling with -Wall must not see it.
#pragma once
#include <kiln/detail/internal_header.hpp>

#if defined(__AVX512F__)
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#define KILN_AVX512_BEGIN                                                              \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define KILN_AVX512_END _Pragma("GCC diagnostic pop")
#else
#define KILN_AVX512_BEGIN
#define KILN_AVX512_END
#endif

#if defined(__AVX512F__)
namespace kiln::detail::avx512 {

/// Lanes [lo, hi) of a 16-lane mask, both bounds clamped to [0, 16].
inline __mmask16 lanes(std::ptrdiff_t lo, std::ptrdiff_t hi) {
  lo = std::clamp<std::ptrdiff_t>(lo, 0, 16);
  hi = std::clamp<std::ptrdiff_t>(hi, 0, 16);
  if (hi <= lo) return 0;
  const unsigned below_hi = hi == 16 ? 0xFFFFu : (1u << hi) - 1, below_lo = (1u << lo) - 1;
  return static_cast<__mmask16>(below_hi & ~below_lo);
}
/// Lanes [0, n).
inline __mmask16 lanes(std::ptrdiff_t n) { return lanes(0, n); }

#if defined(__AVX512BW__)
/// Lanes [lo, hi) of a 32-lane mask (16-bit elements), both bounds clamped to [0, 32].
inline __mmask32 lanes32(std::ptrdiff_t lo, std::ptrdiff_t hi) {
  lo = std::clamp<std::ptrdiff_t>(lo, 0, 32);
  hi = std::clamp<std::ptrdiff_t>(hi, 0, 32);
  if (hi <= lo) return 0;
  const std::uint64_t below_hi = (std::uint64_t{1} << hi) - 1, below_lo = (std::uint64_t{1} << lo) - 1;
  return static_cast<__mmask32>(below_hi & ~below_lo);
}
#endif

}  // namespace kiln::detail::avx512
#endif
