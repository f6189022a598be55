// kiln/detail/sgemm_avx2.hpp — kiln's own f32 GEMM for AVX2 + FMA targets
// (CPUs without AVX-512: most desktop parts, Zen 1–3, Haswell to Alder Lake).
//
// The same scheme and the same blocking loops as the AVX-512 kernel
// (detail/gemm_blocking.hpp), with 256-bit registers: A is packed into
// panels of MR = 16 rows (two ymm), B into panels of NR = 6 columns, and the
// micro-kernel keeps a 16×6 tile of C in 12 ymm accumulators (two loads of
// A and six broadcasts of B feed 12 fused multiply-adds per step of depth;
// with the two A vectors and a broadcast, 15 of the 16 ymm registers).
//
// Each element of C is summed exactly as the AVX-512 kernel sums it: per
// block of depth (gemm_kc), one chain of fused multiply-adds from zero, then
// added to C. So a model trains to the same bits on an AVX2 CPU as on an
// AVX-512 one (tests/detail/gemm_test.cpp checks both kernels against one
// scalar std::fma loop).
//
// Compiled where the compiler targets AVX2 and FMA (-march=native on such a
// CPU, or -march=x86-64-v3); kiln/detail/gemm.hpp runs it where AVX-512 is
// absent.
#pragma once
#include <kiln/detail/internal_header.hpp>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <kiln/bf16.hpp>
#include <kiln/detail/avx2.hpp>
#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/gemm_blocking.hpp>

namespace kiln::detail::avx2 {

inline constexpr std::ptrdiff_t MR = 16;  ///< rows of C per micro-tile (two ymm)
inline constexpr std::ptrdiff_t NR = 6;   ///< columns of C per micro-tile

/// The rows of A and columns of B packed at a time on this CPU.
inline const gemm_blocks& cpu_blocks() { return gemm_blocks::of_cpu<MR, NR>(); }

/// Floats of packing space gemm() needs for A and for B, for any m, n, k.
inline std::ptrdiff_t packed_a_floats(std::ptrdiff_t m, std::ptrdiff_t k) {
  return gemm_packed_a_floats<MR>(m, k, cpu_blocks());
}
inline std::ptrdiff_t packed_b_floats(std::ptrdiff_t n, std::ptrdiff_t k) {
  return gemm_packed_b_floats<NR>(n, k, cpu_blocks());
}

/// 8 consecutive operand values as f32 (or the first n, the rest zero, and
/// nothing read past them): floats as they are, bf16 widened (exactly),
/// bf16_rounded_f32 (detail/bf16_arrays.hpp) rounded to bf16 values
/// (kiln::bf16::from, bit for bit).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const float* p, std::ptrdiff_t n) { return _mm256_maskload_ps(p, first_lanes(n)); }
inline __m256 widen8(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
inline __m256 load8(const kiln::bf16* p) { return widen8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
inline __m256 load8(const kiln::bf16* p, std::ptrdiff_t n) {
  alignas(16) std::uint16_t part[8] = {};  // (AVX2 has no masked load of 16-bit lanes)
  std::memcpy(part, p, static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(n, 0, 8)) * sizeof(kiln::bf16));
  return widen8(_mm_load_si128(reinterpret_cast<const __m128i*>(part)));
}
inline __m256 load8(const bf16_rounded_f32* p) { return bf16_values_of(load8(reinterpret_cast<const float*>(p))); }
inline __m256 load8(const bf16_rounded_f32* p, std::ptrdiff_t n) {
  return bf16_values_of(load8(reinterpret_cast<const float*>(p), n));
}

/// out[q·ld_out + r] = in[r·8 + q] for an 8 × 8 block held in registers.
inline void transpose_8x8(const __m256 (&r)[8], float* out, std::ptrdiff_t ld_out) {
  __m256 t[8], s[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 8; g += 4) {
    s[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
    s[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
    s[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    s[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  // s[q] (q < 4) holds column q of rows 0–3 in its low half and column q + 4
  // in its high half; s[4 + q] the same of rows 4–7. Join the halves.
  for (int q = 0; q < 4; ++q) {
    _mm256_store_ps(out + q * ld_out, _mm256_permute2f128_ps(s[q], s[4 + q], 0x20));
    _mm256_store_ps(out + (q + 4) * ld_out, _mm256_permute2f128_ps(s[q], s[4 + q], 0x31));
  }
}

/// The vector operations of the small products (detail/gemm_small.hpp):
/// 8 lanes, tiles of 16 rows × up to 6 columns (12 accumulators).
struct small_ops {
  using vec = __m256;
  static constexpr std::ptrdiff_t W = 8;
  static constexpr int cols = 6;
  /// At 8 lanes the blocked kernel was faster on the shallow product that
  /// matters most (784 × 256 × 64 on Zen 4, one side-by-side microbenchmark
  /// of the two routes, two runs: 85 against 72, 104 against 94 GFLOP/s).
  static constexpr bool chunks_shallow_products = false;
  /// Products at most narrow_rows columns wide read op(A) in place (detail/gemm_small.hpp;
  /// the CNN in an AVX2 build on Zen 4: 1.03× at 16, its first convolution's weight
  /// gradient; 1.03× again at 32, its second convolution's 32 filters, as two tiles of rows).
  static constexpr bool narrow_products_in_place = true;
  static constexpr std::ptrdiff_t narrow_rows = 32;
  /// Not taken (detail/gemm_small.hpp): an AVX2 build on Zen 4 with it on ran the MLP 0.975×, the CNN
  /// 1.038× and the transformer 1.009× (5–9 interleaved rounds; docs/performance-log.md).
  static constexpr bool l2_operand_in_place = false;
  static vec zero() { return _mm256_setzero_ps(); }
  static vec load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, vec v) { _mm256_storeu_ps(p, v); }
  static vec add(vec x, vec y) { return _mm256_add_ps(x, y); }
  static vec broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static vec fma(vec x, vec y, vec acc) { return _mm256_fmadd_ps(x, y, acc); }
  static void transpose(const float* src, std::ptrdiff_t ld_src, float* dst, std::ptrdiff_t ld_dst) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld_src);
    transpose_8x8(r, dst, ld_dst);  // (dst 32-byte aligned, as are the rows it stores)
  }
  /// dst[l] (+)= src[l] for l < count ≤ 8: 8 or 4 at a time, then one by
  /// one (no masked store: slow on AMD's cores).
  static void merge_first(float* dst, const float* src, std::ptrdiff_t count, bool add) {
    if (count == 8) {
      store(dst, add ? _mm256_add_ps(load(dst), load(src)) : load(src));
      return;
    }
    std::ptrdiff_t l = 0;
    if (count >= 4) {
      _mm_storeu_ps(dst, add ? _mm_add_ps(_mm_loadu_ps(dst), _mm_loadu_ps(src)) : _mm_loadu_ps(src));
      l = 4;
    }
    for (; l < count; ++l) dst[l] = add ? dst[l] + src[l] : src[l];
  }
};

/// Packs rows [0, mc) and depth [0, kc) of op(A) into MR-row panels, each
/// stored depth after depth (MR floats per depth), zero-padded to MR rows.
template <bool TransA, class Src>
inline void pack_a(const Src* a, std::ptrdiff_t lda, std::ptrdiff_t mc, std::ptrdiff_t kc, float* out) {
  for (std::ptrdiff_t i0 = 0; i0 < mc; i0 += MR) {
    const std::ptrdiff_t rows = std::min(MR, mc - i0);
    if constexpr (!TransA) {
      // op(A)(i, p) = a[i + p·lda]: a panel's depth p is MR consecutive floats
      for (std::ptrdiff_t p = 0; p < kc; ++p) {
        const Src* src = a + i0 + p * lda;
        if (rows == MR) {
          _mm256_store_ps(out, load8(src));
          _mm256_store_ps(out + 8, load8(src + 8));
        } else {
          _mm256_store_ps(out, load8(src, rows));
          _mm256_store_ps(out + 8, rows > 8 ? load8(src + 8, rows - 8) : _mm256_setzero_ps());
        }
        out += MR;
      }
    } else {
      // op(A)(i, p) = a[p + i·lda]: row i of op(A) is contiguous in p. Read
      // 8 rows × 8 depths, transpose them in registers, store 8 depths.
      for (std::ptrdiff_t h = 0; h < MR; h += 8) {
        const std::ptrdiff_t in_half = std::clamp<std::ptrdiff_t>(rows - h, 0, 8);
        const Src* src = a + (i0 + h) * lda;
        for (std::ptrdiff_t p = 0; p < kc; p += 8) {
          const std::ptrdiff_t depth = std::min<std::ptrdiff_t>(8, kc - p);
          __m256 r[8];
          for (std::ptrdiff_t i = 0; i < 8; ++i)
            r[i] = i >= in_half ? _mm256_setzero_ps()
                   : depth == 8 ? load8(src + i * lda + p)
                                : load8(src + i * lda + p, depth);
          if (depth == 8) {
            transpose_8x8(r, out + p * MR + h, MR);
          } else {
            alignas(32) float block[8 * 8];
            transpose_8x8(r, block, 8);
            for (std::ptrdiff_t q = 0; q < depth; ++q)
              _mm256_store_ps(out + (p + q) * MR + h, _mm256_load_ps(block + q * 8));
          }
        }
      }
      out += MR * kc;
    }
  }
}

/// The first NR = 6 lanes of v to out[0, 6), as 4 + 2 (a masked store is
/// slow on AMD's cores: on Zen 3 it was most of packing's time).
inline void store_panel_line(float* out, __m256 v) {
  static_assert(NR == 6, "store_panel_line stores 4 + 2 floats");
  _mm_storeu_ps(out, _mm256_castps256_ps128(v));
  _mm_storel_pi(reinterpret_cast<__m64*>(out + 4), _mm256_extractf128_ps(v, 1));
}

/// Packs depth [0, kc) and columns [0, nc) of op(B) into NR-column panels,
/// each stored depth after depth (NR floats per depth), zero-padded to NR columns.
template <bool TransB, class Src>
inline void pack_b(const Src* b, std::ptrdiff_t ldb, std::ptrdiff_t kc, std::ptrdiff_t nc, float* out) {
  for (std::ptrdiff_t j0 = 0; j0 < nc; j0 += NR) {
    const std::ptrdiff_t cols = std::min(NR, nc - j0);
    if constexpr (TransB) {
      // op(B)(p, j) = b[j + p·ldb]: a panel's depth p is NR consecutive
      // floats, read as 8 where the block has 8 columns from j0 on
      if (nc - j0 >= 8) {
        for (std::ptrdiff_t p = 0; p < kc; ++p, out += NR) store_panel_line(out, load8(b + j0 + p * ldb));
      } else {
        for (std::ptrdiff_t p = 0; p < kc; ++p, out += NR) store_panel_line(out, load8(b + j0 + p * ldb, cols));
      }
    } else {
      // op(B)(p, j) = b[p + j·ldb]: column j is contiguous in p. Transpose
      // 8 depths of the panel's columns (padded to 8 with zeros) at a time.
      for (std::ptrdiff_t p = 0; p < kc; p += 8) {
        const std::ptrdiff_t depth = std::min<std::ptrdiff_t>(8, kc - p);
        __m256 r[8];
        for (std::ptrdiff_t j = 0; j < 8; ++j)
          r[j] = j >= cols ? _mm256_setzero_ps()
                 : depth == 8 ? load8(b + p + (j0 + j) * ldb)
                              : load8(b + p + (j0 + j) * ldb, depth);
        alignas(32) float block[8 * 8];
        transpose_8x8(r, block, 8);
        for (std::ptrdiff_t q = 0; q < depth; ++q) store_panel_line(out + (p + q) * NR, _mm256_load_ps(block + q * 8));
      }
      out += NR * kc;
    }
  }
}

/// C(rows × cols tile at c, ldc) (+)= packed A panel · packed B panel over kc,
/// with V = 2 (rows up to 16) or V = 1 (rows up to 8). A full tile is
/// updated in place; an edge tile through a copy of the accumulators.
// (Not inlined, as the AVX-512 kernel: alone, GCC keeps every accumulator in a register.)
template <int V>
[[gnu::noinline]] void micro_kernel(std::ptrdiff_t kc, const float* a, const float* b, float* c, std::ptrdiff_t ldc,
                                    std::ptrdiff_t rows, std::ptrdiff_t cols, bool add) {
  __m256 acc[V][NR];
  for (int v = 0; v < V; ++v)
    for (int j = 0; j < NR; ++j) acc[v][j] = _mm256_setzero_ps();
  for (std::ptrdiff_t p = 0; p < kc; ++p) {
    __m256 av[V];
    for (int v = 0; v < V; ++v) av[v] = _mm256_load_ps(a + 8 * v);
    _mm_prefetch(reinterpret_cast<const char*>(a + 8 * MR), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      const __m256 bj = _mm256_broadcast_ss(b + j);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[v][j] = _mm256_fmadd_ps(av[v], bj, acc[v][j]);
    }
    a += MR;
    b += NR;
  }
  if (rows == 8 * V && cols == NR) {
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j)
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) {
        float* cj = c + j * ldc + 8 * v;
        _mm256_storeu_ps(cj, add ? _mm256_add_ps(_mm256_loadu_ps(cj), acc[v][j]) : acc[v][j]);
      }
    return;
  }
  // (unrolled, so that every accumulator stays a register through the loop above)
  alignas(32) float tile[8 * V * NR];
#pragma GCC unroll 8
  for (int j = 0; j < NR; ++j)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) _mm256_store_ps(tile + j * 8 * V + 8 * v, acc[v][j]);
  for (std::ptrdiff_t j = 0; j < cols; ++j)
    for (std::ptrdiff_t i = 0; i < rows; ++i) {
      const float t = tile[j * 8 * V + i];
      c[i + j * ldc] = add ? c[i + j * ldc] + t : t;
    }
}

/// f32 products: one float per row and depth, packed from float, bf16 or
/// bf16_rounded_f32 operands.
struct f32_ops {
  static constexpr std::ptrdiff_t MR = avx2::MR, NR = avx2::NR;
  using packed = float;
  static constexpr std::ptrdiff_t width = 1;
  static constexpr std::ptrdiff_t steps(std::ptrdiff_t kc) { return kc; }
  template <bool TransA, class Src>
  static void pack_a(const Src* a, std::ptrdiff_t lda, std::ptrdiff_t mc, std::ptrdiff_t kc, float* out) {
    avx2::pack_a<TransA>(a, lda, mc, kc, out);
  }
  template <bool TransB, class Src>
  static void pack_b(const Src* b, std::ptrdiff_t ldb, std::ptrdiff_t kc, std::ptrdiff_t nc, float* out) {
    avx2::pack_b<TransB>(b, ldb, kc, nc, out);
  }
  template <int V>
  static void kernel(std::ptrdiff_t kc, const float* a, const float* b, float* c, std::ptrdiff_t ldc,
                     std::ptrdiff_t rows, std::ptrdiff_t cols, bool add) {
    micro_kernel<V>(kc, a, b, c, ldc, rows, cols, add);
  }
};

/// C(m×n, ldc) += op(A)·op(B) (= with `overwrite`; then k ≥ 1); pa and pb
/// hold packed_a_floats(m, k) and packed_b_floats(n, k) floats, 64-byte
/// aligned (`blocks`: other than this CPU's only to test that the bits do
/// not depend on them).
template <bool TransA, bool TransB>
void gemm(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const float* a, std::ptrdiff_t lda, const float* b,
          std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* pa, float* pb, bool overwrite = false,
          const gemm_blocks& blocks = cpu_blocks()) {
  blocked_gemm<f32_ops, TransA, TransB, float, float>(m, n, k, a, lda, b, ldb, c, ldc, pa, pb, overwrite, blocks);
}

/// C(m×n, ldc) += op(A)·op(B) over the operands' bf16 values (= with
/// `overwrite`; then k ≥ 1), rounded or widened while they are packed, then
/// f32 FMAs: bit for bit the f32 product of rounded copies. pa and pb as for gemm().
template <bool TransA, bool TransB, class SA, class SB>
void gemm_bf16_values(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const SA* a, std::ptrdiff_t lda,
                      const SB* b, std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* pa, float* pb,
                      bool overwrite) {
  blocked_gemm<f32_ops, TransA, TransB>(m, n, k, as_bf16_values(a), lda, as_bf16_values(b), ldb, c, ldc, pa, pb,
                                        overwrite, cpu_blocks());
}

}  // namespace kiln::detail::avx2

#endif  // __AVX2__ && __FMA__
