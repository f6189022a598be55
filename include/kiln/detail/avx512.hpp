// kiln/detail/avx512.hpp — what kiln's AVX-512 kernels share: the
// intrinsics, and a pair of macros around each kernel header's body.
//
// GCC 12 reports its own AVX-512 intrinsics (`__Y = __Y` in the unpack,
// permute and masked-load helpers) as used uninitialized once they are
// inlined (GCC bug 105593): the warning is about GCC's header, not kiln's
// code, and users compiling with -Wall must not see it.
#pragma once
#include <kiln/detail/internal_header.hpp>

#if defined(__AVX512F__)
#include <immintrin.h>
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
