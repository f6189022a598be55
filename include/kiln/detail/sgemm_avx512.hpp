// kiln/detail/sgemm_avx512.hpp — kiln's own f32 GEMM for AVX-512 targets.
//
// C(m×n) += op(A)(m×k) · op(B)(k×n), column-major, in the BLIS scheme
// (the blocking, derived from the CPU's caches, and its loops:
// detail/gemm_blocking.hpp): B is packed into panels of NR columns, A into
// panels of MR rows, and a register-blocked micro-kernel keeps an MR×NR
// tile of C in zmm registers while it walks a block of depth: two 16-float loads of A and NR
// broadcasts of B feed 2·NR fused multiply-adds per step (MR = 32, NR = 8:
// 16 accumulators, enough independent chains for the FMA latency).
//
// Why not Eigen's kernel: on the MLP's shapes (k = 64…784, n = 64) Eigen's
// GEBP reaches ≈ 70 % of this CPU's FMA peak; this kernel, with blocking
// chosen for those shapes and no per-call set-up, gets closer (see
// benchmarks/gemm_benchmark.cpp and docs/performance-log.md).
//
// bf16 operands (AVX512-BF16, the same blocking): detail/sgemm_avx512_bf16.hpp.
//
// The packing space is the caller's (kiln::detail::gemm_scratch): nothing is
// allocated here. Compiled only where the compiler targets AVX-512F; AVX2
// targets use detail/sgemm_avx2.hpp (the same sums in the same order), others
// Eigen's kernel (kiln/detail/gemm.hpp chooses).
#pragma once
#include <kiln/detail/internal_header.hpp>

#if defined(__AVX512F__) && !defined(__FMA__)
#error "kiln: a build with AVX-512F needs FMA as well (add -mfma, or use -march=native or -march=x86-64-v4)"
#elif defined(__AVX512F__)

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include <kiln/bf16.hpp>
#include <kiln/detail/avx512.hpp>
#include <kiln/detail/gemm_blocking.hpp>
#include <kiln/detail/sgemm_avx2.hpp>

KILN_AVX512_BEGIN

namespace kiln::detail::avx512 {

inline constexpr std::ptrdiff_t MR = 32;  ///< rows of C per micro-tile (two zmm)
inline constexpr std::ptrdiff_t NR = 8;   ///< columns of C per micro-tile (the batch, 64, is a multiple)

/// The rows of A and columns of B packed at a time on this CPU (from its
/// caches: detail/gemm_blocking.hpp); the depth is gemm_kc everywhere.
inline const gemm_blocks& cpu_blocks() { return gemm_blocks::of_cpu<MR, NR>(); }

/// Floats of packing space run() needs for A and for B, for any m, n, k.
inline std::ptrdiff_t packed_a_floats(std::ptrdiff_t m, std::ptrdiff_t k) {
  return gemm_packed_a_floats<MR>(m, k, cpu_blocks());
}
inline std::ptrdiff_t packed_b_floats(std::ptrdiff_t n, std::ptrdiff_t k) {
  return gemm_packed_b_floats<NR>(n, k, cpu_blocks());
}

/// 16 consecutive operand values as f32 (all, or the lanes of a mask, the
/// rest zero): floats as they are, bf16 widened (exactly). An operand a
/// program keeps in bf16 (activations, the step's copy of the weights) is
/// packed by the same code as one in f32.
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
#if defined(__AVX512BW__)
inline __m512 widen16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
inline __m512 load16(const kiln::bf16* p) { return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load16(const kiln::bf16* p, __mmask16 m) {
  // (a 512-bit masked load of 16-bit lanes, of which the low half is kept: the 256-bit one needs AVX-512VL)
  return widen16(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(static_cast<__mmask32>(m), p)));
}
#endif

/// dst[q·ld_dst + r] = src[r·ld_src + q] for a 16 × 16 block.
template <class Src>
inline void transpose_16x16(const Src* src, std::ptrdiff_t ld_src, float* dst, std::ptrdiff_t ld_dst) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = load16(src + i * ld_src);
  // Interleave pairs of rows at 32-bit, then 64-bit granularity, then move 128-bit lanes.
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
  }
  // r[4g + s] now holds, in 128-bit lane L, column 4L + s of rows 4g … 4g + 3.
  for (int s = 0; s < 4; ++s) {
    // Gather lane L of r[s], r[4 + s], r[8 + s], r[12 + s] into output row 4L + s.
    const __m512 a01lo = _mm512_shuffle_f32x4(r[s], r[4 + s], 0x44);  // lanes 0,1 of r[s] | lanes 0,1 of r[4+s]
    const __m512 a01hi = _mm512_shuffle_f32x4(r[s], r[4 + s], 0xEE);  // lanes 2,3 | lanes 2,3
    const __m512 b01lo = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0x44);
    const __m512 b01hi = _mm512_shuffle_f32x4(r[8 + s], r[12 + s], 0xEE);
    t[s] = _mm512_shuffle_f32x4(a01lo, b01lo, 0x88);       // lane 0 of each: output row s
    t[4 + s] = _mm512_shuffle_f32x4(a01lo, b01lo, 0xDD);   // lane 1: row 4 + s
    t[8 + s] = _mm512_shuffle_f32x4(a01hi, b01hi, 0x88);   // lane 2: row 8 + s
    t[12 + s] = _mm512_shuffle_f32x4(a01hi, b01hi, 0xDD);  // lane 3: row 12 + s
  }
  for (int q = 0; q < 16; ++q) _mm512_storeu_ps(dst + q * ld_dst, t[q]);
}

/// The vector operations of the small products (detail/gemm_small.hpp):
/// 16 lanes, tiles of 32 rows × up to 10 columns (20 accumulators: the
/// 10-class head in one tile; 12 were no faster and are more kernels to compile).
struct small_ops {
  using vec = __m512;
  static constexpr std::ptrdiff_t W = 16;
  static constexpr int cols = 10;
  /// Shallow products with a larger op(B) take the direct route in chunks
  /// (detail/gemm_small.hpp): faster than the blocked kernel at 16 lanes.
  static constexpr bool chunks_shallow_products = true;
  /// Products at most narrow_rows columns wide (one tile of rows) read op(A) in place
  /// (detail/gemm_small.hpp).
  static constexpr bool narrow_products_in_place = true;
  static constexpr std::ptrdiff_t narrow_rows = 2 * W;
  /// Products whose op(A) (or, as Cᵀ, op(B)ᵀ) is at most half the L2 reread it from there once per chunk of
  /// columns instead of packing (detail/gemm_small.hpp).
  static constexpr bool l2_operand_in_place = true;
  static vec zero() { return _mm512_setzero_ps(); }
  static vec load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, vec v) { _mm512_storeu_ps(p, v); }
  static vec add(vec x, vec y) { return _mm512_add_ps(x, y); }
  static vec broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static vec fma(vec x, vec y, vec acc) { return _mm512_fmadd_ps(x, y, acc); }
  /// (dst 32-byte aligned, ld_dst a multiple of 8.) Four 8 × 8 transposes
  /// in 256-bit registers: with them the 10-output forward product ran 7 %
  /// faster on Zen 4 than with one 16 × 16 transpose in 512-bit registers.
  /// (AVX-512F implies AVX2, and kiln, like Eigen, rejects it without FMA,
  /// above: so detail/sgemm_avx2.hpp is there.)
  static void transpose(const float* src, std::ptrdiff_t ld_src, float* dst, std::ptrdiff_t ld_dst) {
    for (int i0 = 0; i0 < 16; i0 += 8)
      for (int q0 = 0; q0 < 16; q0 += 8) {
        __m256 r[8];
        for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (i0 + i) * ld_src + q0);
        avx2::transpose_8x8(r, dst + q0 * ld_dst + i0, ld_dst);
      }
  }
  /// dst[l] (+)= src[l] for l < count.
  static void merge_first(float* dst, const float* src, std::ptrdiff_t count, bool add) {
    const __mmask16 m = lanes(count);
    const __m512 s = _mm512_maskz_loadu_ps(m, src);
    _mm512_mask_storeu_ps(dst, m, add ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst), s) : s);
  }
};

/// block[q·16 + r] = src[r·ld + q] for r < rows, q < depth, and zero for the
/// rest of the 16 × 16 block: the transpose of a partial block, which reads
/// nothing outside it.
template <class Src>
inline void transpose_partial(const Src* src, std::ptrdiff_t ld, std::ptrdiff_t rows, std::ptrdiff_t depth,
                              float* block) {
  alignas(64) float rows_in[16 * 16];
  for (std::ptrdiff_t r = 0; r < 16; ++r)
    _mm512_store_ps(rows_in + r * 16, r < rows ? load16(src + r * ld, lanes(depth)) : _mm512_setzero_ps());
  transpose_16x16(rows_in, 16, block, 16);
}

/// Packs rows [0, mc) and depth [0, kc) of op(A) into MR-row panels, each
/// stored depth after depth (MR floats per depth), zero-padded to MR rows.
template <bool TransA, class Src>
inline void pack_a(const Src* a, std::ptrdiff_t lda, std::ptrdiff_t mc, std::ptrdiff_t kc, float* out) {
  for (std::ptrdiff_t i0 = 0; i0 < mc; i0 += MR) {
    const std::ptrdiff_t rows = std::min(MR, mc - i0);
    if constexpr (!TransA) {
      // op(A)(i, p) = a[i + p·lda]: a panel's depth p is MR consecutive floats
      const __mmask16 lo = lanes(rows), hi = lanes(rows - 16);
      for (std::ptrdiff_t p = 0; p < kc; ++p) {
        const Src* src = a + i0 + p * lda;
        _mm512_store_ps(out, load16(src, lo));
        _mm512_store_ps(out + 16, load16(src + 16, hi));
        out += MR;
      }
    } else {
      // op(A)(i, p) = a[p + i·lda]: row i of op(A) is contiguous in p. Read
      // 16 rows × 16 depths, transpose them in registers, store 16 depths.
      alignas(64) float block[16 * 16];
      for (std::ptrdiff_t h = 0; h < MR; h += 16) {
        const std::ptrdiff_t in_half = std::clamp<std::ptrdiff_t>(rows - h, 0, 16);
        const Src* src = a + (i0 + h) * lda;
        for (std::ptrdiff_t p = 0; p < kc; p += 16) {
          const std::ptrdiff_t depth = std::min<std::ptrdiff_t>(16, kc - p);
          if (in_half == 16 && depth == 16) {
            transpose_16x16(src + p, lda, out + p * MR + h, MR);
            continue;
          }
          if (in_half == 0) {
            for (std::ptrdiff_t q = 0; q < depth; ++q) _mm512_store_ps(out + (p + q) * MR + h, _mm512_setzero_ps());
            continue;
          }
          transpose_partial(src + p, lda, in_half, depth, block);
          for (std::ptrdiff_t q = 0; q < depth; ++q)
            _mm512_store_ps(out + (p + q) * MR + h, _mm512_load_ps(block + q * 16));
        }
      }
      out += MR * kc;
    }
  }
}

/// Packs depth [0, kc) and columns [0, nc) of op(B) into NR-column panels,
/// each stored depth after depth (NR floats per depth), zero-padded to NR columns.
template <bool TransB, class Src>
inline void pack_b(const Src* b, std::ptrdiff_t ldb, std::ptrdiff_t kc, std::ptrdiff_t nc, float* out) {
  static_assert(NR == 8, "pack_b moves a panel's depth as one 256-bit vector");
  for (std::ptrdiff_t j0 = 0; j0 < nc; j0 += NR) {
    const std::ptrdiff_t cols = std::min(NR, nc - j0);
    if constexpr (TransB) {
      // op(B)(p, j) = b[j + p·ldb]: a panel's depth p is NR consecutive floats
      // (a 512-bit masked load, of which the low half is kept: the 256-bit one needs AVX-512VL)
      const __mmask16 m = lanes(cols);
      for (std::ptrdiff_t p = 0; p < kc; ++p) {
        _mm256_store_ps(out, _mm512_castps512_ps256(load16(b + j0 + p * ldb, m)));
        out += NR;
      }
    } else {
      // op(B)(p, j) = b[p + j·ldb]: column j is contiguous in p. Transpose
      // 16 depths of the panel's columns at a time.
      alignas(64) float block[16 * 16];
      for (std::ptrdiff_t p = 0; p < kc; p += 16) {
        const std::ptrdiff_t depth = std::min<std::ptrdiff_t>(16, kc - p);
        transpose_partial(b + p + j0 * ldb, ldb, cols, depth, block);
        for (std::ptrdiff_t q = 0; q < depth; ++q) _mm256_store_ps(out + (p + q) * NR, _mm256_load_ps(block + q * 16));
      }
      out += NR * kc;
    }
  }
}

/// C tile += acc (or = acc when `add` is false, without reading C): in
/// place for a full tile, through masks and a column count at an edge.
template <int V>
inline void store_tile(const __m512 (&acc)[V][NR], float* c, std::ptrdiff_t ldc, std::ptrdiff_t rows,
                       std::ptrdiff_t cols, bool add) {
  if (cols == NR && rows == 16 * V) {
    if (!add) {
#pragma GCC unroll 16
      for (int j = 0; j < NR; ++j)
        for (int v = 0; v < V; ++v) _mm512_storeu_ps(c + j * ldc + 16 * v, acc[v][j]);
      return;
    }
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) {
      float* cj = c + j * ldc;
      for (int v = 0; v < V; ++v) _mm512_storeu_ps(cj + 16 * v, _mm512_add_ps(_mm512_loadu_ps(cj + 16 * v), acc[v][j]));
    }
  } else {
    __mmask16 mask[V];
    for (int v = 0; v < V; ++v) mask[v] = lanes(rows - 16 * v);
    for (int j = 0; j < cols; ++j) {
      float* cj = c + j * ldc;
      for (int v = 0; v < V; ++v)
        _mm512_mask_storeu_ps(cj + 16 * v, mask[v],
                              add ? _mm512_add_ps(_mm512_maskz_loadu_ps(mask[v], cj + 16 * v), acc[v][j]) : acc[v][j]);
    }
  }
}

/// C(rows × cols tile at c, ldc) (+)= packed A panel · packed B panel over kc,
/// with V = 2 (rows up to 32) or V = 1 (rows up to 16: half the work).
/// A full tile is updated in place; an edge tile through masks and a column count.
// (Not inlined: inside the blocking loops GCC 12 spills the A vectors to the
// stack, which halves the rate; alone it keeps all of them in registers.)
template <int V>
[[gnu::noinline]] void micro_kernel(std::ptrdiff_t kc, const float* a, const float* b, float* c, std::ptrdiff_t ldc,
                                    std::ptrdiff_t rows, std::ptrdiff_t cols, bool add) {
  __m512 acc[V][NR];
  for (int v = 0; v < V; ++v)
    for (int j = 0; j < NR; ++j) acc[v][j] = _mm512_setzero_ps();
  for (std::ptrdiff_t p = 0; p < kc; ++p) {
    __m512 av[V];
    for (int v = 0; v < V; ++v) av[v] = _mm512_load_ps(a + 16 * v);
    _mm_prefetch(reinterpret_cast<const char*>(a + 8 * MR), _MM_HINT_T0);
#pragma GCC unroll 16
    for (int j = 0; j < NR; ++j) {
      const __m512 bj = _mm512_set1_ps(b[j]);
      for (int v = 0; v < V; ++v) acc[v][j] = _mm512_fmadd_ps(av[v], bj, acc[v][j]);
    }
    a += MR;
    b += NR;
  }
  store_tile<V>(acc, c, ldc, rows, cols, add);
}

/// f32 operands: one float per row and depth.
struct f32_ops {
  static constexpr std::ptrdiff_t MR = avx512::MR, NR = avx512::NR;
  using packed = float;
  static constexpr std::ptrdiff_t width = 1;
  static constexpr std::ptrdiff_t steps(std::ptrdiff_t kc) { return kc; }
  template <bool TransA>
  static void pack_a(const float* a, std::ptrdiff_t lda, std::ptrdiff_t mc, std::ptrdiff_t kc, float* out) {
    avx512::pack_a<TransA>(a, lda, mc, kc, out);
  }
  template <bool TransB>
  static void pack_b(const float* b, std::ptrdiff_t ldb, std::ptrdiff_t kc, std::ptrdiff_t nc, float* out) {
    avx512::pack_b<TransB>(b, ldb, kc, nc, out);
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


}  // namespace kiln::detail::avx512

KILN_AVX512_END

#endif  // __AVX512F__ (with FMA)
