// kiln/detail/gemm_blocking.hpp — how kiln's own GEMM kernels (AVX-512,
// AVX2) cut a product into blocks, and the loops that walk them.
//
// The BLIS scheme: C(m×n) += op(A)(m×k)·op(B)(k×n) is cut into
//
//   - blocks of depth KC (fixed, 384, whatever the CPU: see below),
//   - blocks of NC columns of B, packed into NR-column panels (kept in L3),
//   - blocks of MC rows of A, packed into MR-row panels (kept in L2),
//
// and a register-blocked micro-kernel adds an MR×NR tile of op(A)·op(B)
// over one block of depth, the panels streaming from L1.
//
// MC and NC are derived from the caches of the CPU the program runs on
// (sysconf, else /sys), once per process: the A block takes about 30 % of
// one core's L2 (the rest holds B's panel, C's tiles and the other
// operand's stream; 30 % is what measured fastest on Zen 4's 1 MiB L2, and
// the same share of Ice Lake's 1.25 MiB gives 256 rows), the B block at
// most a quarter of L3 (other cores and replicas share it).
//
// The order of every sum is fixed by KC alone: each element of C is, for
// each block of depth in turn, its running value plus one chain of fused
// multiply-adds over that block, started from zero. Blocking over rows and
// columns only decides which tiles are computed when, so the results are
// the same bits on every CPU kind whose kernel follows this order (kiln's
// AVX-512 and AVX2 kernels; tests/detail/gemm_test.cpp checks both against
// a scalar std::fma loop in that order).
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln::detail {

/// The depth of a packed panel. It fixes the order of every sum, so it is
/// the same on every CPU.
inline constexpr std::ptrdiff_t gemm_kc = 384;

/// The block of an extent `total` split into equal blocks of at most `most`,
/// rounded up to a multiple of `unit` (784 deep: 3 × 272, not 384 + 384 + 16).
constexpr std::ptrdiff_t even_block(std::ptrdiff_t total, std::ptrdiff_t most, std::ptrdiff_t unit) {
  const std::ptrdiff_t blocks = (total + most - 1) / most;
  const std::ptrdiff_t block = (total + blocks - 1) / blocks;
  return std::min(most, (block + unit - 1) / unit * unit);
}

/// The cache sizes the blocking is derived from, in bytes.
struct cache_sizes {
  std::ptrdiff_t l2 = 0, l3 = 0;
};

namespace gemm_detail {
/// The first word of a small text file (at most 15 characters); false if none.
inline bool sys_word(const char* path, char (&word)[16]) {
  word[0] = 0;
  std::FILE* f = std::fopen(path, "r");
  if (!f) return false;
  const int read = std::fscanf(f, "%15s", word);
  std::fclose(f);
  return read == 1;
}
/// A size in bytes from a /sys cache file ("1024K", "32768K"), or 0.
inline std::ptrdiff_t sys_cache_bytes(const char* path) {
  char word[16];
  if (!sys_word(path, word)) return 0;
  char* unit = nullptr;
  const long value = std::strtol(word, &unit, 10);
  if (value <= 0) return 0;
  return static_cast<std::ptrdiff_t>(value) * (*unit == 'K' ? 1024 : *unit == 'M' ? 1024 * 1024 : 1);
}
/// The size in bytes of the cache of this level that holds data (type
/// "Data" or "Unified", not "Instruction") among `dir`/index0 … index15
/// (cpu0's are in /sys/devices/system/cpu/cpu0/cache: each indexN names
/// its level, type and size; N is an enumeration, not the level), or 0.
inline std::ptrdiff_t sys_cache_bytes_of_level(const char* dir, int level) {
  char path[512], word[16];
  // path = dir/indexN/file; false when it would not fit (no such file, then)
  const auto file = [&](int n, const char* name) {
    return std::snprintf(path, sizeof path, "%s/index%d/%s", dir, n, name) < static_cast<int>(sizeof path);
  };
  for (int i = 0; i < 16; ++i) {
    if (!file(i, "level") || !sys_word(path, word) || std::atoi(word) != level) continue;
    if (!file(i, "type") || !sys_word(path, word) || (std::strcmp(word, "Data") != 0 && std::strcmp(word, "Unified") != 0))
      continue;
    return file(i, "size") ? sys_cache_bytes(path) : 0;
  }
  return 0;
}
/// The size in bytes of this CPU's level 2 or 3 cache (0 for another
/// level): sysconf's answer where it has one (glibc), else /sys's for cpu0.
inline std::ptrdiff_t cache_bytes(int level) {
  if (level != 2 && level != 3) return 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
  const long v = ::sysconf(level == 2 ? _SC_LEVEL2_CACHE_SIZE : _SC_LEVEL3_CACHE_SIZE);
  if (v > 0) return static_cast<std::ptrdiff_t>(v);
#endif
  return sys_cache_bytes_of_level("/sys/devices/system/cpu/cpu0/cache", level);
}
}  // namespace gemm_detail

/// This CPU's per-core L2 and its L3, read once; 512 KiB and 8 MiB where
/// neither sysconf nor /sys says (a conservative guess: the blocking is
/// then smaller than it could be, never wrong).
inline const cache_sizes& cpu_caches() {
  static const cache_sizes sizes = [] {
    cache_sizes s;
    s.l2 = gemm_detail::cache_bytes(2);
    s.l3 = gemm_detail::cache_bytes(3);
    if (s.l2 <= 0) s.l2 = 512 * 1024;
    if (s.l3 <= 0) s.l3 = 8 * 1024 * 1024;
    return s;
  }();
  return sizes;
}

/// The most rows of A and columns of B packed at a time, for a kernel of
/// MR × NR tiles, given the caches (4 bytes per packed value and depth: a
/// bf16 pair takes as many as one float).
struct gemm_blocks {
  std::ptrdiff_t mc = 0, nc = 0;

  static gemm_blocks for_caches(const cache_sizes& caches, std::ptrdiff_t mr, std::ptrdiff_t nr) {
    constexpr std::ptrdiff_t panel_bytes_per_line = gemm_kc * 4;
    const std::ptrdiff_t rows = caches.l2 * 3 / 10 / panel_bytes_per_line / mr * mr;
    const std::ptrdiff_t cols = caches.l3 / 4 / panel_bytes_per_line / nr * nr;
    return {std::clamp<std::ptrdiff_t>(rows, mr, 64 * mr), std::clamp<std::ptrdiff_t>(cols, nr, 4096 / nr * nr)};
  }
  /// This CPU's blocking for a kernel of MR × NR tiles.
  template <std::ptrdiff_t MR, std::ptrdiff_t NR>
  static const gemm_blocks& of_cpu() {
    static const gemm_blocks blocks = for_caches(cpu_caches(), MR, NR);
    return blocks;
  }
};

/// Floats of packing space the blocked loops need for A and for B, for any
/// m, n, k, with `blocks`, for a kernel of MR × NR tiles.
template <std::ptrdiff_t MR>
std::ptrdiff_t gemm_packed_a_floats(std::ptrdiff_t m, std::ptrdiff_t k, const gemm_blocks& blocks) {
  return (even_block(m, blocks.mc, MR) + MR - 1) / MR * MR * even_block(k, gemm_kc, 16);
}
template <std::ptrdiff_t NR>
std::ptrdiff_t gemm_packed_b_floats(std::ptrdiff_t n, std::ptrdiff_t k, const gemm_blocks& blocks) {
  return (even_block(n, blocks.nc, NR) + NR - 1) / NR * NR * even_block(k, gemm_kc, 16);
}

/// The blocking loops every kernel shares. Ops names the tile (MR, NR), the
/// packed element type, how many of them a row takes per step of depth
/// (`width`), how many steps a depth of kc is, the packing routines and the
/// micro-kernel (kernel<2> for up to MR rows, kernel<1> for up to MR / 2).
/// With `overwrite`, the first block of depth stores C instead of adding to
/// it (C's old values are never read).
template <class Ops, bool TransA, bool TransB, class SA, class SB>
void blocked_gemm(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const SA* a, std::ptrdiff_t lda, const SB* b,
                  std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, typename Ops::packed* pa, typename Ops::packed* pb,
                  bool overwrite, const gemm_blocks& blocks) {
  constexpr std::ptrdiff_t MR = Ops::MR, NR = Ops::NR;
  const std::ptrdiff_t nc_block = even_block(n, blocks.nc, NR), kc_block = even_block(k, gemm_kc, 16),
                       mc_block = even_block(m, blocks.mc, MR);
  for (std::ptrdiff_t jc = 0; jc < n; jc += nc_block) {
    const std::ptrdiff_t nc = std::min(nc_block, n - jc);
    for (std::ptrdiff_t pc = 0; pc < k; pc += kc_block) {
      const std::ptrdiff_t kc = std::min(kc_block, k - pc), panel = Ops::steps(kc) * Ops::width;
      const bool add = pc > 0 || !overwrite;
      Ops::template pack_b<TransB>(TransB ? b + jc + pc * ldb : b + pc + jc * ldb, ldb, kc, nc, pb);
      for (std::ptrdiff_t ic = 0; ic < m; ic += mc_block) {
        const std::ptrdiff_t mc = std::min(mc_block, m - ic);
        Ops::template pack_a<TransA>(TransA ? a + pc + ic * lda : a + ic + pc * lda, lda, mc, kc, pa);
        for (std::ptrdiff_t jr = 0; jr < nc; jr += NR) {
          for (std::ptrdiff_t ir = 0; ir < mc; ir += MR) {
            const std::ptrdiff_t rows = std::min(MR, mc - ir), cols = std::min(NR, nc - jr);
            float* tile = c + (ic + ir) + (jc + jr) * ldc;
            if (rows > MR / 2) {
              Ops::template kernel<2>(Ops::steps(kc), pa + ir * panel, pb + jr * panel, tile, ldc, rows, cols, add);
            } else {
              Ops::template kernel<1>(Ops::steps(kc), pa + ir * panel, pb + jr * panel, tile, ldc, rows, cols, add);
            }
          }
        }
      }
    }
  }
}

}  // namespace kiln::detail
