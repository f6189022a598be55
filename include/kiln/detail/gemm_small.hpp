// kiln/detail/gemm_small.hpp — products with one small operand, without
// packing the large one: the MLP's 10-class head (10 rows or 10 columns), an
// input gradient 10 deep, a first convolution's 25 taps, an attention head.
//
// The blocked scheme (detail/gemm_blocking.hpp) packs both operands so that
// each packed value is reused by many tiles. When op(B) is small (k·n ≤ 4096
// floats, an L1's worth), each value of A is used by one or a few column
// tiles, and packing costs about as much as the product: here A is read
// where it is (column-major; a transposed A is copied column-major one tile
// of rows at a time, 8 × 8 blocks transposed in registers), op(B) is
// broadcast from where it is (it stays in L1), and a tile of 2W rows (two
// vectors of W lanes; one for a product W rows tall) × N columns is summed
// in registers, N ≤ Ops::cols chosen so that the columns split evenly (10
// columns: one tile of 10 with AVX-512, two of 5 with AVX2). When op(A) is
// the small one (the 10-output forward product: 10 × 128), the transposed
// product Cᵀ = op(B)ᵀ·op(A)ᵀ is computed the same way, with the batch along
// the lanes, and each tile is transposed in registers as it is stored.
//
// With AVX-512 (Ops::chunks_shallow_products), a shallow product (k ≤ 64: a
// weight gradient over a batch of 64 or less, 784 × 256 × 64) whose op(B)
// is larger than that, but at most 4 chunks of L1 size, and whose A is at
// most reread_floats takes the direct route too, a chunk of op(B)'s columns
// at a time; A is read once per chunk. At such depths packing is a large
// share of the product: on Zen 4, 784 × 256 × 64 went from 88 % of the FMA
// peak to 95 % (kiln_gemm_benchmarks before and after, 3 interleaved runs;
// docs/performance-log.md).
//
// With Ops::narrow_products_in_place (both Ops; measured on Zen 4), a
// product whose op(B) is at most Ops::narrow_rows wide (32 columns: the
// batch of a replicate<2> replica, a convolution's 32 filters) takes the
// transposed route whatever its other sizes. With AVX-512 Cᵀ = op(B)ᵀ·op(A)ᵀ
// is then one tile of rows (2W = 32), so each value of op(A) is read once,
// where it is, and packing it would copy all of it to save nothing. With
// AVX2 (2W = 16) Cᵀ is two tiles of rows: op(A)ᵀ goes in chunks of columns
// that stay in L1 while both tiles read them, and op(B)ᵀ (n × depth, from
// L2) is read again for each chunk, which still beats packing (the CNN in
// an AVX2 build on Zen 4: 1.03×). With one tile, op(B)ᵀ is copied at most
// once per block of depth. On Zen 4 the MLP's forward
// product at 32 (256 × 32 × 784) went from 136 to 122 µs
// (docs/performance-log.md has the others).
//
// With Ops::l2_operand_in_place (AVX-512; off with AVX2, where it measured mixed),
// a product whose op(A) is at most half of this CPU's L2 (read at run
// time) takes the direct route whatever op(B)'s size: op(A) is read once
// per chunk of columns, from L2, where it is (column-major) or from one
// column-major copy made first (stored transposed, when there is more
// than one chunk); op(B) is not packed. Failing that, Cᵀ likewise when
// op(B)ᵀ is that small. These are the transformer's position-wise products
// over many positions: forward (64 × 2048 × 256, 256 × 2048 × 64: the
// weight transposed), weight gradients (64 × 192 × 2048, 256 × 64 × 2048)
// and input gradients (64 × 2048 × 192, 256 × 2048 × 64), and the MLP's
// forward and input gradients at batch 64 (256 × 64 × 784: as Cᵀ with a
// 1 MiB L2, directly with 2 MiB), deep or long products whose packing the
// tiles of C do not pay back:
// docs/performance-log.md has the measurements.
//
// The sums are those of the blocked kernels, bit for bit: per block of depth
// (the same blocks, even_block(k, gemm_kc, 16)), one chain of fused
// multiply-adds from zero, added to C (or stored, for the first block of an
// overwrite). So which route a product takes, which differs between CPU
// kinds, changes no result; tests/detail/gemm_test.cpp checks both routes
// against the scalar loop.
//
// gemm_converted takes operands whose values the product converts (the bf16
// products without AVX512-BF16: rounded to bf16 values, or widened from
// bf16; detail/gemm.hpp). Each is converted into a copy in its layout
// first, except the one the route reads by tiles of rows when it is stored
// transposed with W rows or more: that one is converted as the route
// copies it column-major (detail/gemm_small_copies.hpp), not converted
// into a copy and then copied again. The f32 products' gemm() is
// gemm_converted with both operands read as they are (as_is): one copy of
// the routes' logic.
//
// Ops (one per vector width: avx512::small_ops, avx2::small_ops) gives the
// vector type and its W lanes, the three routing flags above and
// narrow_rows (the widest narrow product), `cols`, the
// most columns a tile's 2·cols accumulators leave registers for, and zero,
// load, store, add, broadcast, fma, a W × W transpose
// (dst[q·ld_dst + r] = src[r·ld_src + q]) and merge_first
// (dst[l] (+)= src[l] for l < count).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>
#include <utility>

#include <kiln/detail/gemm_blocking.hpp>
#include <kiln/detail/gemm_small_copies.hpp>

namespace kiln::detail::small_gemm {

/// Which way a product is computed.
enum class route { blocked, direct, transposed };

/// Floats of op(B) (or of op(A), transposed) the small products keep in L1.
inline constexpr std::ptrdiff_t small_operand_floats = 4096;
/// Floats of the other operand read in place more than twice (it is read
/// once per column tile): beyond an L2's share, blocking pays.
inline constexpr std::ptrdiff_t reread_floats = 65536;
/// The deepest product that takes the direct route a chunk of columns at a
/// time (with Ops::chunks_shallow_products), and the most chunks.
inline constexpr std::ptrdiff_t shallow_depth = 64, shallow_chunks = 4;

/// The most columns of op(B) (k deep) the direct route takes at a time: as
/// many as stay in L1, at least one tile's.
template <class Ops>
constexpr std::ptrdiff_t chunk_columns(std::ptrdiff_t k) {
  return std::max<std::ptrdiff_t>(Ops::cols, small_operand_floats / k);
}

/// True when a C (or Cᵀ) with this many rows is one tile of rows (2W):
/// the small routes then read the other operand once, where it is.
template <class Ops>
constexpr bool one_tile_of_rows(std::ptrdiff_t rows) {
  return rows <= 2 * Ops::W;
}

/// The most floats of op(A) a product with Ops::l2_operand_in_place reads
/// once per chunk of columns: half of this CPU's L2 (the transformer's
/// 64 × 2048 with 1 MiB).
inline std::ptrdiff_t l2_operand_floats() {
  return cpu_caches().l2 / 2 / static_cast<std::ptrdiff_t>(sizeof(float));
}

/// How C(m×n) = op(A)(m×k)·op(B)(k×n) is best computed with these Ops,
/// however its operands are stored (all but the rule for an operand in L2).
template <class Ops>
constexpr route choose_by_shape(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k) {
  if (k * n <= small_operand_floats && (n <= 2 * Ops::cols || m * k <= reread_floats)) return route::direct;
  if (k * m <= small_operand_floats && (m <= 2 * Ops::cols || n * k <= reread_floats)) return route::transposed;
  if (Ops::chunks_shallow_products && k <= shallow_depth && m * k <= reread_floats &&
      (n + chunk_columns<Ops>(k) - 1) / chunk_columns<Ops>(k) <= shallow_chunks)
    return route::direct;  // (in chunks of columns)
  if (Ops::narrow_products_in_place && n <= Ops::narrow_rows) return route::transposed;  // (Cᵀ: op(A) read in place)
  return route::blocked;
}

/// How C(m×n) = op(A)(m×k)·op(B)(k×n) is best computed with these Ops on
/// this CPU, however its operands are stored.
template <class Ops>
route choose(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k) {
  const route by_shape = choose_by_shape<Ops>(m, n, k);
  if (by_shape != route::blocked || !Ops::l2_operand_in_place) return by_shape;
  // op(A) (or, for Cᵀ, op(B)ᵀ) in half the L2: reread from there once per chunk of columns
  if (m * k <= l2_operand_floats()) return route::direct;
  if (n * k <= l2_operand_floats()) return route::transposed;
  return route::blocked;
}

/// Columns of op(B) run() takes at a time for a direct product (all of
/// them when C is one tile of rows: op(B) is then read once).
template <class Ops>
constexpr std::ptrdiff_t chunk_of(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k) {
  return one_tile_of_rows<Ops>(m) ? n : even_block(n, chunk_columns<Ops>(k), 1);
}

/// Floats run() copies op(A) (m × k) into once, column-major with its rows
/// rounded up to W, when it is stored transposed and op(B) is taken in more
/// than one chunk (else each tile of rows is copied as it is used); 0 when
/// op(B) is taken in one chunk.
template <class Ops>
constexpr std::ptrdiff_t whole_copy_floats(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k) {
  if (chunk_of<Ops>(m, n, k) >= n) return 0;
  return (m + Ops::W - 1) / Ops::W * Ops::W * k;
}

/// Floats of scratch gemm() needs for this product by `how`, however its
/// operands are stored: one tile's rows of op(A) as deep as a block, and
/// room for a whole copy of the route's op(A) (op(B)ᵀ for route::transposed)
/// where run() would make one were it stored transposed (0 for the blocked
/// route).
template <class Ops>
constexpr std::ptrdiff_t route_scratch_floats(route how, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k) {
  if (how == route::blocked) return 0;
  // (route::transposed computes Cᵀ: its op(A) is op(B)ᵀ, n × k)
  const std::ptrdiff_t whole = how == route::direct ? whole_copy_floats<Ops>(m, n, k) : whole_copy_floats<Ops>(n, m, k);
  return whole + 2 * Ops::W * even_block(k, gemm_kc, 16);
}

/// Floats of scratch run() needs for this shape, whichever operands are
/// transposed (0 when it takes the blocked route).
template <class Ops>
std::ptrdiff_t scratch_floats(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k) {
  return route_scratch_floats<Ops>(choose<Ops>(m, n, k), m, n, k);
}

/// C tile (V·W × N at c, ldc) (+)= A (V·W rows at a, lda) · op(B) over kc,
/// op(B)(p, j) at b[j + p·ldb] (TransB) or b[p + j·ldb]; V is 2, or 1 for a
/// product W rows tall (an attention head's 16).
// (Not inlined, like the blocked micro-kernels: the accumulators stay in registers.)
template <class Ops, int V, int N, bool TransB>
[[gnu::noinline]] void tile(std::ptrdiff_t kc, const float* a, std::ptrdiff_t lda, const float* b, std::ptrdiff_t ldb,
                            float* c, std::ptrdiff_t ldc, bool add) {
  using vec = typename Ops::vec;
  constexpr std::ptrdiff_t W = Ops::W;
  vec acc[V][N];
  for (int v = 0; v < V; ++v)
    for (int j = 0; j < N; ++j) acc[v][j] = Ops::zero();
  for (std::ptrdiff_t p = 0; p < kc; ++p) {
    vec av[V];
    for (int v = 0; v < V; ++v) av[v] = Ops::load(a + p * lda + v * W);
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) {
      const vec bj = Ops::broadcast(TransB ? b + j + p * ldb : b + p + j * ldb);
      for (int v = 0; v < V; ++v) acc[v][j] = Ops::fma(av[v], bj, acc[v][j]);
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < N; ++j)
    for (int v = 0; v < V; ++v) {
      float* cj = c + j * ldc + v * W;
      Ops::store(cj, add ? Ops::add(Ops::load(cj), acc[v][j]) : acc[v][j]);
    }
}

/// tile<Ops, V, N, TransB>(args…) for the N given at run time (1 ≤ n ≤ Ops::cols).
// (Not inlined either: one dispatch per V and TransB, not one in every copy
// GCC makes of run(), keeps the compile time of a program using kiln down.)
template <class Ops, int V, bool TransB, int... Ns, class... Args>
[[gnu::noinline]] void tile_of_width(std::integer_sequence<int, Ns...>, std::ptrdiff_t n, Args... args) {
  (void)((n == Ns + 1 ? (tile<Ops, V, Ns + 1, TransB>(args...), true) : false) || ...);
}

/// C(i, j) (+)= t[i + j·2W] for i < rows, j < cols, C(i, j) at c[i + j·ldc],
/// or, TransC, at c[j + i·ldc] (rows of the tile transposed in registers).
template <class Ops, bool TransC>
void merge_tile(const float* t, std::ptrdiff_t rows, std::ptrdiff_t cols, float* c, std::ptrdiff_t ldc, bool add) {
  constexpr std::ptrdiff_t W = Ops::W;
  if constexpr (!TransC) {
    for (std::ptrdiff_t j = 0; j < cols; ++j)
      for (std::ptrdiff_t i = 0; i < rows; ++i) c[i + j * ldc] = add ? c[i + j * ldc] + t[i + j * 2 * W] : t[i + j * 2 * W];
  } else {
    alignas(64) float rows_of[W * W];
    for (std::ptrdiff_t r0 = 0; r0 < rows; r0 += W)
      for (std::ptrdiff_t j0 = 0; j0 < cols; j0 += W) {
        Ops::transpose(t + r0 + j0 * 2 * W, 2 * W, rows_of, W);  // rows_of[q·W + l]: row r0 + q, column j0 + l
        const std::ptrdiff_t count = std::min(W, cols - j0);
        for (std::ptrdiff_t q = 0; q < std::min(W, rows - r0); ++q)
          Ops::merge_first(c + j0 + (r0 + q) * ldc, rows_of + q * W, count, add);
      }
  }
}

/// C(m×n) (+)= op(A)·op(B) for op(B) small enough to stay in L1 (or read
/// once: C one tile of rows), with
/// C(i, j) at c[i + j·ldc], or TransC at c[j + i·ldc]. `scratch` holds
/// one tile's rows of op(A) as deep as a block (2W · even_block(k)). With
/// `overwrite` the first block of depth stores C instead of adding to it.
/// A transposed op(A) may be of another type SA, converted as it is copied.
template <class Ops, bool TransA, bool TransB, bool TransC, class SA = float, class Convert = as_is>
void run_columns(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const SA* a, std::ptrdiff_t lda,
                 const float* b, std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* scratch, bool overwrite,
                 Convert convert = {}) {
  constexpr std::ptrdiff_t W = Ops::W, R = 2 * W;
  constexpr auto widths = std::make_integer_sequence<int, Ops::cols>{};
  const std::ptrdiff_t kc_block = even_block(k, gemm_kc, 16), tiles = (n + Ops::cols - 1) / Ops::cols;
  // a tile's sums on their way to a ragged or transposed C (columns past the tile's stay zero)
  alignas(64) float t[R * ((Ops::cols + W - 1) / W * W)] = {};
  for (std::ptrdiff_t pc = 0; pc < k; pc += kc_block) {
    const std::ptrdiff_t kc = std::min(kc_block, k - pc);
    const bool add = pc > 0 || !overwrite;
    const float* b_depth = TransB ? b + pc * ldb : b + pc;
    for (std::ptrdiff_t i0 = 0; i0 < m; i0 += R) {
      // the tile's rows of A (two vectors, or one for the last W or fewer):
      // in place, or (transposed, or short of a tile) copied column-major
      // and zero-padded, once for all its columns
      const std::ptrdiff_t rows = std::min(R, m - i0), tall = rows > W ? R : W;
      const float* a_tile = scratch;
      std::ptrdiff_t ld_tile = tall;
      if constexpr (TransA) {
        copy_transposed<Ops>(a + pc + i0 * lda, lda, rows, kc, scratch, tall, convert);
      } else if (const float* in_place = a + i0 + pc * lda; rows == tall) {
        a_tile = in_place;
        ld_tile = lda;
      } else {
        for (std::ptrdiff_t p = 0; p < kc; ++p) {
          std::copy(in_place + p * lda, in_place + p * lda + rows, scratch + p * tall);
          std::fill(scratch + p * tall + rows, scratch + (p + 1) * tall, 0.0f);
        }
      }
      for (std::ptrdiff_t tile_index = 0, j0 = 0; tile_index < tiles; ++tile_index) {
        const std::ptrdiff_t cols = n / tiles + (tile_index < n % tiles ? 1 : 0);
        const float* b_cols = TransB ? b_depth + j0 : b_depth + j0 * ldb;
        const bool in_c = !TransC && rows == tall;
        float* out = in_c ? c + i0 + j0 * ldc : t;
        const std::ptrdiff_t ld_out = in_c ? ldc : R;
        if (tall == R) {
          tile_of_width<Ops, 2, TransB>(widths, cols, kc, a_tile, ld_tile, b_cols, ldb, out, ld_out, in_c && add);
        } else {
          tile_of_width<Ops, 1, TransB>(widths, cols, kc, a_tile, ld_tile, b_cols, ldb, out, ld_out, in_c && add);
        }
        if (!in_c) merge_tile<Ops, TransC>(t, rows, cols, TransC ? c + j0 + i0 * ldc : c + i0 + j0 * ldc, ldc, add);
        j0 += cols;
      }
    }
  }
}

/// The same for any op(B) the route takes (route::direct; route::transposed
/// calls it with the operands swapped): run_columns on equal chunks of
/// op(B)'s columns, at most chunk_columns(k) each (one chunk when op(B) is
/// small, or when C is one tile of rows: op(B) is then read once, and
/// chunks would only copy A again for each). A transposed op(A) taken in
/// more than one chunk is first copied column-major whole
/// (whole_copy_floats), not once per chunk. A transposed op(A) may be of
/// another type SA, converted as it is copied; one stored column-major is
/// f32, read where it is.
template <class Ops, bool TransA, bool TransB, bool TransC, class SA = float, class Convert = as_is>
void run(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const SA* a, std::ptrdiff_t lda, const float* b,
         std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* scratch, bool overwrite, Convert convert = {}) {
  static_assert(TransA || reads_in_place<SA, Convert>,
                "kiln::detail::small_gemm::run: an op(A) stored column-major is read where it is: give it converted");
  if (m <= 0 || n <= 0 || k <= 0) return;
  const std::ptrdiff_t chunk = chunk_of<Ops>(m, n, k);
  if constexpr (TransA) {
    if (const std::ptrdiff_t whole = whole_copy_floats<Ops>(m, n, k); whole > 0) {
      const std::ptrdiff_t ld = whole / k;
      copy_transposed<Ops>(a, lda, m, k, scratch, ld, convert);
      run<Ops, false, TransB, TransC>(m, n, k, static_cast<const float*>(scratch), ld, b, ldb, c, ldc, scratch + whole,
                                      overwrite);
      return;
    }
  }
  for (std::ptrdiff_t j = 0; j < n; j += chunk)
    run_columns<Ops, TransA, TransB, TransC>(m, std::min(chunk, n - j), k, a, lda, TransB ? b + j : b + j * ldb, ldb,
                                             TransC ? c + j : c + j * ldc, ldc, scratch, overwrite, convert);
}

/// C(m×n, ldc) (+)= op(A)·op(B) by `route` (direct or transposed), op(A)
/// of SA converted by convert_a, op(B) of SB by convert_b (the bf16
/// products without AVX512-BF16 take them rounded to bf16 values, or
/// widened from bf16: detail/gemm.hpp); gemm() below is the f32 products'
/// call, with operands read as they are. The route's op(A) (op(B)ᵀ for
/// Cᵀ), when stored transposed with W rows or more, is converted as the
/// route copies it column-major (whole, or a tile of rows at a time); the
/// other operands are converted first, in long runs, into `copy`
/// ((m + n)·k floats, the route's op(A) first), each in its layout. An
/// operand that is its own floats (as_is) is read where it is. The sums of
/// the blocked kernels, on the converted values.
template <class Ops, bool TransA, bool TransB, class SA, class SB, class ConvertA, class ConvertB>
void gemm_converted(route how, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const SA* a, std::ptrdiff_t lda,
                    const SB* b, std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* scratch, float* copy,
                    bool overwrite, ConvertA convert_a, ConvertB convert_b) {
  // (fewer than W rows to copy transposed would be all edges, converted a value at a time)
  constexpr std::ptrdiff_t W = Ops::W;
  if (how == route::direct) {
    const auto [bb, lb] = in_layout<TransB>(k, n, b, ldb, copy, m * k, convert_b);
    if constexpr (TransA) {
      if (m >= W) {
        run<Ops, true, TransB, false>(m, n, k, a, lda, bb, lb, c, ldc, scratch, overwrite, convert_a);
        return;
      }
    }
    const auto [aa, la] = in_layout<TransA>(m, k, a, lda, copy, 0, convert_a);
    run<Ops, TransA, TransB, false>(m, n, k, aa, la, bb, lb, c, ldc, scratch, overwrite);
  } else {
    // Cᵀ = op(B)ᵀ·op(A)ᵀ: op(B)ᵀ(j, p) is b[j + p·ldb] (TransB: column-major) or b[p + j·ldb];
    // op(A)ᵀ(p, i) is a[p + i·lda] (TransA) or a[i + p·lda]
    const auto [aa, la] = in_layout<TransA>(m, k, a, lda, copy, n * k, convert_a);
    if constexpr (!TransB) {
      if (n >= W) {
        run<Ops, true, !TransA, true>(n, m, k, b, ldb, aa, la, c, ldc, scratch, overwrite, convert_b);
        return;
      }
    }
    const auto [bb, lb] = in_layout<TransB>(k, n, b, ldb, copy, 0, convert_b);
    run<Ops, !TransB, !TransA, true>(n, m, k, bb, lb, aa, la, c, ldc, scratch, overwrite);
  }
}

/// C(m×n, ldc) (+)= op(A)·op(B) by `route` (direct or transposed), f32
/// operands read where they are; the same bits as the blocked kernels.
template <class Ops, bool TransA, bool TransB>
void gemm(route how, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const float* a, std::ptrdiff_t lda,
          const float* b, std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* scratch, bool overwrite) {
  gemm_converted<Ops, TransA, TransB>(how, m, n, k, a, lda, b, ldb, c, ldc, scratch, nullptr, overwrite, as_is{},
                                      as_is{});
}

/// C(m×n, ldc) (+)= op(A)·op(B) by the route choose() picks, and true; or,
/// where it picks the blocked kernels, nothing and false. (gemm_scratch's
/// f32 products, and the benchmark's AVX2 rows, dispatch through this.)
template <class Ops, bool TransA, bool TransB>
bool gemm_if_small(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const float* a, std::ptrdiff_t lda,
                   const float* b, std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* scratch, bool overwrite) {
  const route how = choose<Ops>(m, n, k);
  if (how == route::blocked) return false;
  gemm<Ops, TransA, TransB>(how, m, n, k, a, lda, b, ldb, c, ldc, scratch, overwrite);
  return true;
}

}  // namespace kiln::detail::small_gemm
