// kiln/detail/sgemm_avx512_bf16.hpp — kiln's GEMM with bf16 operands, for
// targets with AVX512-BF16: the blocking and micro-tiles of
// detail/sgemm_avx512.hpp, with panels packed as bf16 pairs and
// vdpbf16ps for the products (f32 accumulation).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <kiln/detail/sgemm_avx512.hpp>

#if defined(__AVX512F__) && defined(__AVX512BF16__)

#include <cstddef>
#include <cstdint>

KILN_AVX512_BEGIN

namespace kiln::detail::avx512 {

// ---- bf16 operands: AVX512-BF16 dot products of pairs, f32 accumulation ----------
//
// The same blocking, with operands converted to bf16 as they are packed
// (rounded to nearest even by the hardware; NaN stays NaN). A panel holds,
// for each pair of depths (2q, 2q + 1), each row's two values side by side
// in one 32-bit lane, which is what vdpbf16ps multiplies pairwise and adds
// into an f32 lane: a zmm of A is 16 rows × 2 depths, a B broadcast is one
// column's pair. An odd depth is padded with a zero.

/// 16 bf16 values in 16-bit lanes 0…15 and 16 more in 16…31, as pairs:
/// 32-bit lane i = (lane 16 + i) << 16 | lane i.
inline __m512i interleave_halves(__m512i both) {
  const __m512i order = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21,
                                         5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(order, both);
}
/// Interleaves lo[i], hi[i] as bf16 pairs: lane i = (bf16(hi[i]) << 16) | bf16(lo[i]).
inline __m512i bf16_pairs(__m512 lo, __m512 hi) {
  return interleave_halves(reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));  // lo in 0…15, hi in 16…31
}
/// The same from 16 consecutive operand values at lo and 16 at hi: rounded
/// from f32, or (bf16 operands) moved as they are.
inline __m512i bf16_pairs(const float* lo, const float* hi) {
  return bf16_pairs(_mm512_loadu_ps(lo), _mm512_loadu_ps(hi));
}
inline __m512i bf16_pairs(const kiln::bf16* lo, const kiln::bf16* hi) {
  const __m256i l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo));
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi));
  return interleave_halves(_mm512_inserti64x4(_mm512_castsi256_si512(l), h, 1));
}

/// Converts depths [0, depth) of one f32 panel packed by pack_a / pack_b
/// (Width = MR or NR floats per depth) into bf16 pairs: pair q holds each
/// row's depths 2q and 2q + 1 side by side, an odd depth padded with zero.
template <std::ptrdiff_t Width>
inline void pairs_from_panel(const float* f, std::ptrdiff_t depth, std::uint16_t* out) {
  for (std::ptrdiff_t d = 0; d < depth; d += 2) {
    std::uint16_t* pair = out + d * Width;  // (pair d/2 starts at (d/2)·Width·2)
    if constexpr (Width >= 16) {
      for (std::ptrdiff_t h = 0; h < Width; h += 16) {
        const __m512 hi = d + 1 < depth ? _mm512_load_ps(f + (d + 1) * Width + h) : _mm512_setzero_ps();
        _mm512_store_si512(pair + 2 * h, bf16_pairs(_mm512_load_ps(f + d * Width + h), hi));
      }
    } else {
      static_assert(Width == 8, "a B panel is one 256-bit vector per depth");
      const __m512 lo = _mm512_castps256_ps512(_mm256_load_ps(f + d * Width));
      const __m512 hi =
          d + 1 < depth ? _mm512_castps256_ps512(_mm256_load_ps(f + (d + 1) * Width)) : _mm512_setzero_ps();
      _mm256_store_si256(reinterpret_cast<__m256i*>(pair), _mm512_castsi512_si256(bf16_pairs(lo, hi)));
    }
  }
}

/// 16 consecutive operand values as bf16, rounded to nearest even (a bf16
/// operand as it is).
inline __m256i bf16x16(const float* p) { return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(p))); }
inline __m256i bf16x16(const kiln::bf16* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

template <bool TransA, class Src>
inline void pack_a_bf16(const Src* a, std::ptrdiff_t lda, std::ptrdiff_t mc, std::ptrdiff_t kc, std::uint16_t* out) {
  const std::ptrdiff_t pairs = (kc + 1) / 2;
  alignas(64) float block[16 * 16];
  for (std::ptrdiff_t i0 = 0; i0 < mc; i0 += MR) {
    const std::ptrdiff_t rows = std::min(MR, mc - i0);
    std::ptrdiff_t q = 0;
    if (!TransA && rows == MR) {
      for (; 2 * q + 1 < kc; ++q)
        for (std::ptrdiff_t h = 0; h < MR; h += 16) {
          const Src* col = a + i0 + h + 2 * q * lda;
          _mm512_store_si512(out + (q * MR + h) * 2, bf16_pairs(col, col + lda));
        }
    } else if (TransA && rows == MR && std::is_same_v<Src, kiln::bf16> && lda % 2 == 0 &&
               reinterpret_cast<std::uintptr_t>(a) % 4 == 0) {
      // bf16 rows, contiguous in depth: a row's pair q is its 32-bit word q,
      // so a panel is the transpose of 16 rows × 16 words, as for floats.
      for (; 2 * q + 32 <= kc; q += 16)
        for (std::ptrdiff_t h = 0; h < MR; h += 16)
          transpose_16x16(reinterpret_cast<const float*>(a + 2 * q + (i0 + h) * lda), lda / 2,
                          reinterpret_cast<float*>(out) + q * MR + h, MR);
    } else if (TransA && rows == MR) {
      for (; 2 * q + 16 <= kc; q += 8)  // 16 depths at a time, through a transpose
        for (std::ptrdiff_t h = 0; h < MR; h += 16) {
          transpose_16x16(a + 2 * q + (i0 + h) * lda, lda, block, 16);  // block[d·16 + r] = op(A)(i0+h+r, 2q+d)
          for (std::ptrdiff_t d = 0; d < 16; d += 2)
            _mm512_store_si512(out + ((q + d / 2) * MR + h) * 2,
                               bf16_pairs(_mm512_load_ps(block + d * 16), _mm512_load_ps(block + (d + 1) * 16)));
        }
    }
    // What is left (partial panels, a depth that is not a multiple of 16 or
    // is odd): packed in f32 by pack_a, 16 depths at a time, then paired.
    alignas(64) float panel[16 * MR];
    for (std::ptrdiff_t p = 2 * q; p < kc; p += 16) {
      const std::ptrdiff_t depth = std::min<std::ptrdiff_t>(16, kc - p);
      pack_a<TransA>(TransA ? a + p + i0 * lda : a + i0 + p * lda, lda, rows, depth, panel);
      pairs_from_panel<MR>(panel, depth, out + p * MR);
    }
    out += pairs * MR * 2;
  }
}

template <bool TransB, class Src>
inline void pack_b_bf16(const Src* b, std::ptrdiff_t ldb, std::ptrdiff_t kc, std::ptrdiff_t nc, std::uint16_t* out) {
  const std::ptrdiff_t pairs = (kc + 1) / 2;
  for (std::ptrdiff_t j0 = 0; j0 < nc; j0 += NR) {
    const std::ptrdiff_t cols = std::min(NR, nc - j0);
    std::ptrdiff_t q = 0;
    if (cols == NR && TransB) {
      // op(B)(p, j) = b[j + p·ldb]: rows 2q and 2q + 1 hold the NR columns' pairs.
      for (; 2 * q + 1 < kc; ++q) {
        const Src* row = b + j0 + 2 * q * ldb;
        const __m512i p16 = bf16_pairs(load16(row, lanes(NR)), load16(row + ldb, lanes(NR)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + q * NR * 2), _mm512_castsi512_si256(p16));
      }
    } else if (cols == NR && !TransB) {
      // op(B)(p, j) = b[p + j·ldb]: column j's pair (2q, 2q + 1) is two adjacent
      // floats. Convert 16 depths of each column, then transpose the 8 × 8 pairs.
      for (; 2 * q + 16 <= kc; q += 8) {
        __m256i v[NR];
        for (int j = 0; j < NR; ++j) v[j] = bf16x16(b + 2 * q + (j0 + j) * ldb);
        const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
        const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
        const __m256i t4 = _mm256_unpacklo_epi32(v[4], v[5]), t5 = _mm256_unpackhi_epi32(v[4], v[5]);
        const __m256i t6 = _mm256_unpacklo_epi32(v[6], v[7]), t7 = _mm256_unpackhi_epi32(v[6], v[7]);
        const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
        const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
        const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
        const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
        // u0: pair 0 of columns 0-3 | pair 4 of columns 0-3 (128-bit halves); u4 the same for columns 4-7, …
        const __m256i rows[8] = {_mm256_permute2x128_si256(u0, u4, 0x20), _mm256_permute2x128_si256(u1, u5, 0x20),
                                 _mm256_permute2x128_si256(u2, u6, 0x20), _mm256_permute2x128_si256(u3, u7, 0x20),
                                 _mm256_permute2x128_si256(u0, u4, 0x31), _mm256_permute2x128_si256(u1, u5, 0x31),
                                 _mm256_permute2x128_si256(u2, u6, 0x31), _mm256_permute2x128_si256(u3, u7, 0x31)};
        for (int t = 0; t < 8; ++t) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (q + t) * NR * 2), rows[t]);
      }
    }
    alignas(64) float panel[16 * NR];  // what is left, as in pack_a_bf16
    for (std::ptrdiff_t p = 2 * q; p < kc; p += 16) {
      const std::ptrdiff_t depth = std::min<std::ptrdiff_t>(16, kc - p);
      pack_b<TransB>(TransB ? b + j0 + p * ldb : b + p + j0 * ldb, ldb, depth, cols, panel);
      pairs_from_panel<NR>(panel, depth, out + p * NR);
    }
    out += pairs * NR * 2;
  }
}

template <int V>
[[gnu::noinline]] void micro_kernel_bf16(std::ptrdiff_t pairs, const std::uint16_t* a, const std::uint16_t* b, float* c,
                                         std::ptrdiff_t ldc, std::ptrdiff_t rows, std::ptrdiff_t cols, bool add) {
  __m512 acc[V][NR];
  for (int v = 0; v < V; ++v)
    for (int j = 0; j < NR; ++j) acc[v][j] = _mm512_setzero_ps();
  for (std::ptrdiff_t q = 0; q < pairs; ++q) {
    __m512bh av[V];
    for (int v = 0; v < V; ++v) av[v] = reinterpret_cast<__m512bh>(_mm512_load_si512(a + 32 * v));
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) {
      std::int32_t pair;
      std::memcpy(&pair, b + 2 * j, sizeof pair);
      __m512i pairs16 = _mm512_set1_epi32(pair);
#if defined(__clang__) && (__clang_major__ == 16 || __clang_major__ == 17)
      // Clang 16's VectorCombine recurses until the compiler's stack
      // overflows (a segfault) on a bitcast of a broadcast to bf16 lanes
      // (LLVM issue 68117); an empty asm hides the broadcast from it. The
      // code generated is the same as clang-14's (vbroadcastss, vdpbf16ps).
      asm("" : "+v"(pairs16));
#endif
      const __m512bh bj = reinterpret_cast<__m512bh>(pairs16);
      for (int v = 0; v < V; ++v) acc[v][j] = _mm512_dpbf16_ps(acc[v][j], av[v], bj);
    }
    a += 2 * MR;
    b += 2 * NR;
  }
  store_tile<V>(acc, c, ldc, rows, cols, add);
}

/// bf16 operands: a pair of depths per row and step.
struct bf16_ops {
  static constexpr std::ptrdiff_t MR = avx512::MR, NR = avx512::NR;
  using packed = std::uint16_t;
  static constexpr std::ptrdiff_t width = 2;
  static constexpr std::ptrdiff_t steps(std::ptrdiff_t kc) { return (kc + 1) / 2; }
  template <bool TransA, class Src>
  static void pack_a(const Src* a, std::ptrdiff_t lda, std::ptrdiff_t mc, std::ptrdiff_t kc, packed* out) {
    pack_a_bf16<TransA>(a, lda, mc, kc, out);
  }
  template <bool TransB, class Src>
  static void pack_b(const Src* b, std::ptrdiff_t ldb, std::ptrdiff_t kc, std::ptrdiff_t nc, packed* out) {
    pack_b_bf16<TransB>(b, ldb, kc, nc, out);
  }
  template <int V>
  static void kernel(std::ptrdiff_t pairs, const packed* a, const packed* b, float* c, std::ptrdiff_t ldc,
                     std::ptrdiff_t rows, std::ptrdiff_t cols, bool add) {
    micro_kernel_bf16<V>(pairs, a, b, c, ldc, rows, cols, add);
  }
};

/// C(m×n, ldc) (+)= op(A)·op(B) with both operands rounded to bf16 (an
/// operand given in bf16 is taken as it is); pa and pb hold
/// packed_a_floats(m, k) and packed_b_floats(n, k) floats (the bf16 panels
/// need at most as many bytes), 64-byte aligned.
template <bool TransA, bool TransB, class SA, class SB>
void gemm_bf16(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const SA* a, std::ptrdiff_t lda, const SB* b,
               std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* pa, float* pb, bool overwrite = false) {
  blocked_gemm<bf16_ops, TransA, TransB, SA, SB>(m, n, k, a, lda, b, ldb, c, ldc, reinterpret_cast<std::uint16_t*>(pa),
                                                 reinterpret_cast<std::uint16_t*>(pb), overwrite, cpu_blocks());
}
}  // namespace kiln::detail::avx512

KILN_AVX512_END

#endif  // __AVX512F__ && __AVX512BF16__
