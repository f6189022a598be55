// kiln's GEMM (its AVX-512 or AVX2 kernel where the target has one, Eigen's
// kernel otherwise) against a plain triple loop in double, over shapes that hit
// every edge of the blocking: partial micro-tiles in m and n, depths across
// a panel boundary, all four transpositions, accumulate or overwrite, and a
// leading dimension larger than the matrix. The operands sit against a page
// that may not be touched (before or after them), so a packer that reads
// outside its matrix crashes the test.
#include <kiln/fwd.hpp>

#include <kiln/detail/gemm.hpp>
#include <kiln/random.hpp>

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <new>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {
using kiln::detail::index;

/// n values of T that end right before a page with no access (or, with
/// `at_start`, begin right after one); unmapped when it goes out of scope.
template <class T>
class guarded_values {
 public:
  guarded_values(std::size_t n, bool at_start) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t data_pages = (n * sizeof(T) + page - 1) / page + 1;
    bytes_ = (data_pages + 2) * page;
    base_ = static_cast<char*>(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) std::abort();
    mprotect(base_, page, PROT_NONE);
    mprotect(base_ + (data_pages + 1) * page, page, PROT_NONE);
    data_ = reinterpret_cast<T*>(at_start ? base_ + page : base_ + (data_pages + 1) * page - n * sizeof(T));
    size_ = n;
  }
  guarded_values(const guarded_values&) = delete;
  guarded_values& operator=(const guarded_values&) = delete;
  ~guarded_values() { munmap(base_, bytes_); }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  T* data() { return data_; }
  std::size_t size() const { return size_; }
  T& operator[](std::size_t i) { return data_[i]; }

 private:
  char* base_;
  std::size_t bytes_, size_;
  T* data_;
};
using guarded_floats = guarded_values<float>;

/// The values of a matrix stored rows × cols with leading dimension ld,
/// exactly up to its last element (the padding after the last column is not
/// there, so reading past it touches the guard page).
inline std::size_t extent(index ld, index rows, index cols) {
  return static_cast<std::size_t>(rows == 0 || cols == 0 ? 0 : ld * (cols - 1) + rows);
}

/// A workspace as a caller reserves it (`floats`, 64-byte aligned as
/// gemm_scratch's), followed by a guard of NaNs no kernel writes, which
/// must stay untouched.
class guarded_workspace {
 public:
  explicit guarded_workspace(std::ptrdiff_t floats)
      : floats_(floats),
        data_(static_cast<float*>(::operator new[](static_cast<std::size_t>(floats + guard) * sizeof(float),
                                                   std::align_val_t{64}))) {
    std::fill_n(data_.get() + floats, guard, std::bit_cast<float>(untouched));
  }
  float* get() const { return data_.get(); }
  bool guard_untouched() const {
    return std::all_of(data_.get() + floats_, data_.get() + floats_ + guard,
                       [](float v) { return std::bit_cast<std::uint32_t>(v) == untouched; });
  }

 private:
  static constexpr std::ptrdiff_t guard = 64;
  static constexpr std::uint32_t untouched = 0x7fc0dead;  // a NaN no kernel writes
  struct aligned_free {
    void operator()(float* p) const { ::operator delete[](p, std::align_val_t{64}); }
  };
  std::ptrdiff_t floats_;
  std::unique_ptr<float[], aligned_free> data_;
};

template <bool TransA, bool TransB>
void check(index m, index n, index k, bool accumulate, std::uint64_t seed) {
  kiln::rng g(seed);
  const index lda = (TransA ? k : m) + 3, ldb = (TransB ? n : k) + 1, ldc = m + 5;
  guarded_floats a(extent(lda, TransA ? k : m, TransA ? m : k), seed % 3 == 0),
      b(extent(ldb, TransB ? n : k, TransB ? k : n), seed % 3 == 1);
  std::vector<float> c(static_cast<std::size_t>(ldc * n));
  for (auto& v : a) v = static_cast<float>(g.uniform(-1, 1));
  for (auto& v : b) v = static_cast<float>(g.uniform(-1, 1));
  for (auto& v : c) v = static_cast<float>(g.uniform(-1, 1));
  std::vector<double> want(c.begin(), c.end());
  for (index j = 0; j < n; ++j) {
    for (index i = 0; i < m; ++i) {
      double sum = accumulate ? want[static_cast<std::size_t>(i + j * ldc)] : 0.0;
      for (index p = 0; p < k; ++p) {
        const double x = TransA ? a[static_cast<std::size_t>(p + i * lda)] : a[static_cast<std::size_t>(i + p * lda)];
        const double y = TransB ? b[static_cast<std::size_t>(j + p * ldb)] : b[static_cast<std::size_t>(p + j * ldb)];
        sum += x * y;
      }
      want[static_cast<std::size_t>(i + j * ldc)] = sum;
    }
  }
  kiln::detail::gemm_scratch<float> scratch;
  scratch.reserve(m, n, k);
  scratch.run<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, accumulate);
  for (index j = 0; j < n; ++j)
    for (index i = 0; i < ldc; ++i) {
      const auto at = static_cast<std::size_t>(i + j * ldc);
      // f32 products summed over k terms of magnitude ≤ 1: a few ulps of k.
      const double tolerance = i < m ? 4e-7 * static_cast<double>(k + 2) : 0.0;
      ASSERT_NEAR(c[at], want[at], tolerance) << "m " << m << " n " << n << " k " << k << " at (" << i << ", " << j
                                              << ")" << (i >= m ? ": outside the matrix, must be untouched" : "");
    }
}

TEST(gemm, matches_a_triple_loop_on_every_edge_of_the_blocking) {
  const index ms[] = {1, 7, 16, 17, 32, 33, 100, 200, 257};
  const index ns[] = {1, 5, 8, 9, 64, 70};
  const index ks[] = {0, 1, 3, 64, 383, 384, 385, 800};
  std::uint64_t seed = 1;
  for (index m : ms)
    for (index n : ns)
      for (index k : ks) {
        if (m * n * k > 4'000'000) continue;
        const bool acc = seed % 2 == 0;
        check<false, false>(m, n, k, acc, ++seed);
        check<true, false>(m, n, k, acc, ++seed);
        check<false, true>(m, n, k, acc, ++seed);
        check<true, true>(m, n, k, acc, ++seed);
      }
}

/// op(A)·op(B) (+ C) summed as kiln's kernels document it
/// (detail/gemm_blocking.hpp): per block of depth, one chain of std::fma
/// from zero, added to the running value of C.
template <bool TransA, bool TransB>
std::vector<float> in_kilns_order(index m, index n, index k, const float* a, index lda, const float* b, index ldb,
                                  std::vector<float> c, index ldc, bool accumulate) {
  const index block = kiln::detail::even_block(k, kiln::detail::gemm_kc, 16);
  for (index j = 0; j < n; ++j)
    for (index i = 0; i < m; ++i) {
      float& out = c[static_cast<std::size_t>(i + j * ldc)];
      if (!accumulate) out = 0.0f;
      for (index p0 = 0; p0 < k; p0 += block) {
        float chain = 0.0f;
        for (index p = p0; p < std::min(k, p0 + block); ++p)
          chain = std::fma(TransA ? a[p + i * lda] : a[i + p * lda], TransB ? b[j + p * ldb] : b[p + j * ldb], chain);
        out = p0 == 0 && !accumulate ? chain : out + chain;
      }
    }
  return c;
}

/// kiln's kernel gemm (avx512::gemm or avx2::gemm) with `blocks`, against in_kilns_order, bit for bit.
template <bool TransA, bool TransB, class Kernel>
void check_bits(Kernel kernel, index m, index n, index k, bool accumulate, std::uint64_t seed,
                const kiln::detail::gemm_blocks& blocks, std::ptrdiff_t packed_a, std::ptrdiff_t packed_b) {
  kiln::rng g(seed);
  const index lda = (TransA ? k : m) + 1, ldb = (TransB ? n : k) + 2, ldc = m + 3;
  // (A and B against pages that may not be touched, as in check())
  guarded_floats a(extent(lda, TransA ? k : m, TransA ? m : k), seed % 2 == 0),
      b(extent(ldb, TransB ? n : k, TransB ? k : n), seed % 3 == 0);
  std::vector<float> c(static_cast<std::size_t>(ldc * n));
  for (auto& v : a) v = static_cast<float>(g.uniform(-1, 1));
  for (auto& v : b) v = static_cast<float>(g.uniform(-1, 1));
  for (auto& v : c) v = static_cast<float>(g.uniform(-1, 1));
  const std::vector<float> want = in_kilns_order<TransA, TransB>(m, n, k, a.data(), lda, b.data(), ldb, c, ldc, accumulate);
  // (the packing space as the caller sized it, then a guard the kernel must not write)
  const guarded_workspace pa(packed_a), pb(packed_b);
  kernel(m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, pa.get(), pb.get(), !accumulate, blocks);
  ASSERT_TRUE(pa.guard_untouched() && pb.guard_untouched())
      << "m " << m << " n " << n << " k " << k << " TransA " << TransA << " TransB " << TransB
        << ": written past the packing space the caller reserved";
  for (std::size_t at = 0; at < c.size(); ++at)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(c[at]), std::bit_cast<std::uint32_t>(want[at]))
        << "m " << m << " n " << n << " k " << k << " TransA " << TransA << " TransB " << TransB << " element " << at
        << ": " << c[at] << " against " << want[at];
}

/// check_bits for all four transpositions of one shape, through
/// Ns::gemm<TransA, TransB>.
template <class Ns>
void check_every_transposition(index m, index n, index k, bool accumulate, std::uint64_t seed,
                               const kiln::detail::gemm_blocks& blocks, std::ptrdiff_t packed_a,
                               std::ptrdiff_t packed_b) {
  check_bits<false, false>(Ns::template gemm<false, false>, m, n, k, accumulate, seed, blocks, packed_a, packed_b);
  check_bits<true, false>(Ns::template gemm<true, false>, m, n, k, accumulate, seed, blocks, packed_a, packed_b);
  check_bits<false, true>(Ns::template gemm<false, true>, m, n, k, accumulate, seed, blocks, packed_a, packed_b);
  check_bits<true, true>(Ns::template gemm<true, true>, m, n, k, accumulate, seed, blocks, packed_a, packed_b);
}

/// Every transposition and edge, with this CPU's blocking and with the
/// smallest one (one micro-tile of rows and of columns per block).
template <class Ns>
void check_kernel_bits() {
  using kiln::detail::gemm_blocks;
  const gemm_blocks cpu = Ns::blocks(), smallest{Ns::MR, Ns::NR};
  const index ms[] = {1, 9, 16, 33, 257};
  const index ns[] = {1, 7, 64};
  const index ks[] = {1, 17, 384, 385, 800};
  std::uint64_t seed = 100;
  for (const gemm_blocks& blocks : {cpu, smallest})
    for (index m : ms)
      for (index n : ns)
        for (index k : ks) {
          const bool acc = ++seed % 2 == 0;
          const auto pa = kiln::detail::gemm_packed_a_floats<Ns::MR>(m, k, blocks),
                     pb = kiln::detail::gemm_packed_b_floats<Ns::NR>(n, k, blocks);
          check_every_transposition<Ns>(m, n, k, acc, seed, blocks, pa, pb);
        }
}

#if defined(__AVX512F__)
struct avx512_kernel {
  static constexpr std::ptrdiff_t MR = kiln::detail::avx512::MR, NR = kiln::detail::avx512::NR;
  static const kiln::detail::gemm_blocks& blocks() { return kiln::detail::avx512::cpu_blocks(); }
  template <bool TA, bool TB>
  static void gemm(index m, index n, index k, const float* a, index lda, const float* b, index ldb, float* c, index ldc,
                   float* pa, float* pb, bool overwrite, const kiln::detail::gemm_blocks& blocks) {
    kiln::detail::avx512::gemm<TA, TB>(m, n, k, a, lda, b, ldb, c, ldc, pa, pb, overwrite, blocks);
  }
};
TEST(gemm, avx512_kernel_sums_in_kilns_order_bit_for_bit) { check_kernel_bits<avx512_kernel>(); }
#endif
#if defined(__AVX2__) && defined(__FMA__)
struct avx2_kernel {
  static constexpr std::ptrdiff_t MR = kiln::detail::avx2::MR, NR = kiln::detail::avx2::NR;
  static const kiln::detail::gemm_blocks& blocks() { return kiln::detail::avx2::cpu_blocks(); }
  template <bool TA, bool TB>
  static void gemm(index m, index n, index k, const float* a, index lda, const float* b, index ldb, float* c, index ldc,
                   float* pa, float* pb, bool overwrite, const kiln::detail::gemm_blocks& blocks) {
    kiln::detail::avx2::gemm<TA, TB>(m, n, k, a, lda, b, ldb, c, ldc, pa, pb, overwrite, blocks);
  }
};
// (Where both are compiled, as in an AVX-512 build, this also shows that the
// two kernels give the same bits.)
TEST(gemm, avx2_kernel_sums_in_kilns_order_bit_for_bit) { check_kernel_bits<avx2_kernel>(); }
#endif

/// The small products (detail/gemm_small.hpp) by one route whatever their
/// shape, through check_bits, and the scratch that route needs for any
/// transposition.
template <class Ops, kiln::detail::small_gemm::route How>
struct small_route {
  template <bool TA, bool TB>
  static void gemm(index m, index n, index k, const float* a, index lda, const float* b, index ldb, float* c, index ldc,
                   float* scratch, float*, bool overwrite, const kiln::detail::gemm_blocks&) {
    kiln::detail::small_gemm::gemm<Ops, TA, TB>(How, m, n, k, a, lda, b, ldb, c, ldc, scratch, overwrite);
  }
  static std::ptrdiff_t scratch(index m, index n, index k) {
    return kiln::detail::small_gemm::route_scratch_floats<Ops>(How, m, n, k);
  }
};

/// Both routes, every transposition, ragged rows and columns (tiles of
/// every width), depths across a block boundary: kiln's order, bit for bit.
template <class Ops>
void check_small_bits() {
  using kiln::detail::small_gemm::route;
  const index ms[] = {1, 10, Ops::W, 2 * Ops::W - 1, 2 * Ops::W, 2 * Ops::W + 3, 100};
  const index ns[] = {1, 5, 10, Ops::cols + 1, 64};
  const index ks[] = {1, 10, 17, 128, 385};
  const kiln::detail::gemm_blocks unused{};
  using direct = small_route<Ops, route::direct>;
  using transposed = small_route<Ops, route::transposed>;
  std::uint64_t seed = 500;
  for (index m : ms)
    for (index n : ns)
      for (index k : ks) {
        const bool acc = ++seed % 2 == 0;
        check_every_transposition<direct>(m, n, k, acc, seed, unused, direct::scratch(m, n, k), 1);
        check_every_transposition<transposed>(m, n, k, acc, seed, unused, transposed::scratch(m, n, k), 1);
      }
  // Shallow products whose op(B) does not fit in L1: a chunk of columns at a
  // time (300 columns 40 deep: 3 chunks of 100); and the same chunks through
  // the transposed route (which choose() picks for a small op(A)).
  for (const auto& [m, n, k] : {std::array<index, 3>{100, 300, 40}, {37, 200, 64}, {2 * Ops::W + 1, 129, 33}}) {
    const bool acc = ++seed % 2 == 0;
    check_every_transposition<direct>(m, n, k, acc, seed, unused, direct::scratch(m, n, k), 1);
    check_every_transposition<transposed>(n, m, k, !acc, seed, unused, transposed::scratch(n, m, k), 1);
  }
  // Narrow products with a large op(A), read in place (choose() takes the
  // transposed route for them): the MLP's forward at 32, the CNN's second
  // convolution and its weight gradient, ragged sizes (a tile of rows
  // between W and 2W; with AVX2, a second tile of 13 rows, and of 4: 20
  // columns), four blocks of depth. (2W + 4 columns, a second tile of 4
  // rows, is narrow only with AVX2; with AVX-512, 36, it takes this route
  // here by force.)
  for (const auto& [m, n, k] : {std::array<index, 3>{256, 32, 784}, {196, 32, 400}, {400, 32, 196},
                                {2 * Ops::W * 7 + 5, 2 * Ops::W, 3 * kiln::detail::gemm_kc + 7},
                                {301, 2 * Ops::W - 3, 500}, {301, 3, 500}, {301, 29, 500},
                                {301, 2 * Ops::W + 4, 500}}) {
    const bool acc = ++seed % 2 == 0;
    check_every_transposition<transposed>(m, n, k, acc, seed, unused, transposed::scratch(m, n, k), 1);
  }
  // Products with many chunks of columns, deep or long (choose() takes
  // these routes for an op(A), or op(B)ᵀ, in half the L2): op(A) read once
  // per chunk, in place or, stored transposed, from one copy made first;
  // two tiles of rows or more, ragged tiles (rows not a multiple of W),
  // three blocks of depth.
  for (const auto& [m, n, k] : {std::array<index, 3>{4 * Ops::W, 150, 1000}, {4 * Ops::W - 5, 37, 800},
                                {6 * Ops::W + 5, 300, 200}, {100, 150, 1000}}) {
    const bool acc = ++seed % 2 == 0;
    check_every_transposition<direct>(m, n, k, acc, seed, unused, direct::scratch(m, n, k), 1);
    check_every_transposition<transposed>(n, m, k, !acc, seed, unused, transposed::scratch(n, m, k), 1);
  }
}

/// Rounds to bf16 values (an f32 source) or widens (a bf16 one), a value at
/// a time: the conversion gemm_scratch gives the small routes without
/// AVX512-BF16, written plainly.
struct bf16_values_plainly {
  float operator()(float v) const { return kiln::round_to_bf16(v); }
  float operator()(kiln::bf16 v) const { return static_cast<float>(v); }
  template <class S>
  void operator()(const S* src, std::ptrdiff_t count, float* dst) const {
    for (std::ptrdiff_t i = 0; i < count; ++i) dst[i] = (*this)(src[i]);
  }
};

/// small_gemm::gemm_converted by `how`, op(A) given as SA and op(B) as SB
/// (f32 to round, bf16 to widen) or, `b_rounded`, as f32 already rounded
/// (as_is, read in place): the bits of small_gemm::gemm on the converted
/// values. Leading dimensions dense (`dense`: a copy in its layout is made
/// in one run) or not (a run a column).
template <class Ops, class SA, class SB, bool TransA, bool TransB>
void check_converted(kiln::detail::small_gemm::route how, index m, index n, index k, bool b_rounded, bool overwrite,
                     bool dense, std::uint64_t seed) {
  namespace sg = kiln::detail::small_gemm;
  kiln::rng g(seed);
  const index pad = dense ? 0 : 1;
  const index lda = (TransA ? k : m) + pad, ldb = (TransB ? n : k) + 2 * pad, ldc = m + 3;
  // (the operands against pages that may not be touched, as in check(); their
  // converted values, the reference's operands, in vectors of the same extent)
  guarded_values<SA> a(extent(lda, TransA ? k : m, TransA ? m : k), seed % 2 == 0);
  guarded_values<SB> b(extent(ldb, TransB ? n : k, TransB ? k : n), seed % 3 == 0);
  std::vector<float> a_values(a.size()), b_values(b.size()), c(static_cast<std::size_t>(ldc * n));
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = kiln::detail::stored_as<SA>(static_cast<float>(g.uniform(-1, 1)));
    a_values[i] = bf16_values_plainly{}(a[i]);
  }
  for (std::size_t i = 0; i < b.size(); ++i) {
    if constexpr (std::is_same_v<SB, kiln::bf16>) {
      b[i] = kiln::bf16::from(static_cast<float>(g.uniform(-1, 1)));
      b_values[i] = static_cast<float>(b[i]);
    } else {
      b_values[i] = kiln::round_to_bf16(static_cast<float>(g.uniform(-1, 1)));
      // (unless b_rounded, a value that is not its rounding, b_values[i])
      b[i] = b_rounded ? b_values[i] : std::nextafter(b_values[i], 2.0f);
      if (kiln::round_to_bf16(b[i]) != b_values[i]) b[i] = b_values[i];
    }
  }
  for (auto& v : c) v = static_cast<float>(g.uniform(-1, 1));
  std::vector<float> want = c, got = c;
  // (the scratch the route reserves and the copy gemm_scratch sizes, each
  // followed by a guard that must stay untouched)
  const std::ptrdiff_t scratch_floats = sg::route_scratch_floats<Ops>(how, m, n, k), copy_floats = (m + n) * k;
  const guarded_workspace scratch(scratch_floats), copy(copy_floats);
  sg::gemm<Ops, TransA, TransB>(how, m, n, k, a_values.data(), lda, b_values.data(), ldb, want.data(), ldc,
                                scratch.get(), overwrite);
  if constexpr (std::is_same_v<SB, float>) {
    if (b_rounded) {
      sg::gemm_converted<Ops, TransA, TransB>(how, m, n, k, a.data(), lda, b.data(), ldb, got.data(), ldc,
                                              scratch.get(), copy.get(), overwrite, bf16_values_plainly{}, sg::as_is{});
    }
  }
  if (!b_rounded) {
    sg::gemm_converted<Ops, TransA, TransB>(how, m, n, k, a.data(), lda, b.data(), ldb, got.data(), ldc, scratch.get(),
                                            copy.get(), overwrite, bf16_values_plainly{}, bf16_values_plainly{});
  }
  ASSERT_TRUE(scratch.guard_untouched() && copy.guard_untouched())
      << "m " << m << " n " << n << " k " << k << ": written past the scratch or the copy";
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << "route " << static_cast<int>(how) << " m " << m << " n " << n << " k " << k << " TransA " << TransA
        << " TransB " << TransB << " at " << i;
}

/// The operands of the bf16 products without AVX512-BF16, converted as the
/// small routes read them: both routes, every transposition, f32 and bf16
/// operands, tiles of rows copied one at a time (ragged, short of W) or
/// whole first (op(B) in several chunks), W × W blocks and their edges, two
/// blocks of depth; accumulating or overwriting.
template <class Ops>
void check_small_conversions() {
  using kiln::detail::small_gemm::route;
  std::uint64_t seed = 900;
  for (const auto& [m, n, k] : {std::array<index, 3>{10, 5, 17}, {2 * Ops::W + 3, 10, 40}, {Ops::W - 1, 64, 33},
                                {100, 300, 40}, {4 * Ops::W - 5, 37, 200}, {37, 200, 64}, {2 * Ops::W + 1, 24, 400}})
    for (const route how : {route::direct, route::transposed})
      for (const bool overwrite : {false, true})
        for (const bool dense : {false, true}) {
          for (const bool b_rounded : {false, true}) {
            ++seed;
            check_converted<Ops, float, float, false, false>(how, m, n, k, b_rounded, overwrite, dense, seed);
            check_converted<Ops, float, float, true, false>(how, m, n, k, b_rounded, overwrite, dense, seed);
            check_converted<Ops, float, float, false, true>(how, m, n, k, b_rounded, overwrite, dense, seed);
            check_converted<Ops, float, float, true, true>(how, m, n, k, b_rounded, overwrite, dense, seed);
          }
          ++seed;
          check_converted<Ops, kiln::bf16, float, false, true>(how, m, n, k, false, overwrite, dense, seed);
          check_converted<Ops, kiln::bf16, float, true, true>(how, m, n, k, false, overwrite, dense, seed);
          check_converted<Ops, float, kiln::bf16, false, false>(how, m, n, k, false, overwrite, dense, seed);
          check_converted<Ops, kiln::bf16, kiln::bf16, true, false>(how, m, n, k, false, overwrite, dense, seed);
          check_converted<Ops, kiln::bf16, kiln::bf16, false, true>(how, m, n, k, false, overwrite, dense, seed);
        }
}

/// Which products take which route: the MLP's 10-class head and its
/// 10-deep input gradient skip packing, shallow and narrow products too
/// (with the Ops' flags), the other large products do not by their shape
/// (choose_by_shape); on this CPU (choose), those whose op(A), or op(B)ᵀ,
/// fits in half its L2 skip it too, with the Ops' flag.
template <class Ops>
void check_small_routes() {
  using kiln::detail::small_gemm::choose;
  using kiln::detail::small_gemm::route;
  const auto plain = [](index m, index n, index k) { return kiln::detail::small_gemm::choose_by_shape<Ops>(m, n, k); };
  EXPECT_EQ(plain(10, 64, 128), route::transposed);  // forward of the head: 10 outputs
  EXPECT_EQ(plain(128, 10, 64), route::direct);      // its weight gradient: 10 columns
  EXPECT_EQ(plain(128, 64, 10), route::direct);      // the input gradient through it: 10 deep
  EXPECT_EQ(plain(784, 16, 25), route::direct);      // the first convolution: 25 taps
  EXPECT_EQ(plain(256, 64, 784), route::blocked);
  // the first layer's weight gradient, 64 deep (batch 64), and 32 (replicate<2>): in chunks, with AVX-512
  const route shallow = Ops::chunks_shallow_products ? route::direct : route::blocked;
  EXPECT_EQ(plain(784, 256, 64), shallow);
  EXPECT_EQ(plain(784, 256, 32), shallow);
  EXPECT_EQ(plain(256, 128, 64), shallow);
  EXPECT_EQ(plain(784, 256, 65), route::blocked);
  EXPECT_EQ(plain(1568, 256, 64), route::blocked);  // A too large to be read once per chunk
  EXPECT_EQ(plain(1025, 256, 64), route::blocked);  // (65,600 floats of A: just too large)
  EXPECT_EQ(plain(256, 257, 64), route::blocked);   // op(B) in 5 chunks of 64 columns
  EXPECT_EQ(plain(256, 273, 60), route::blocked);   // 5 chunks of 68
  EXPECT_EQ(plain(196, 400, 32), shallow);          // the CNN's second input gradient
  EXPECT_EQ(plain(256, 2048, 64), route::blocked);  // op(B) more than 4 chunks (a transformer's 64 wide)
  EXPECT_EQ(plain(256, 64, 128), route::blocked);
  // at most 32 columns wide (Ops::narrow_rows: one tile of rows with AVX-512, two with AVX2): op(A) read in place
  static_assert(Ops::narrow_rows == 32);
  EXPECT_EQ(plain(256, 32, 784), route::transposed);  // replicate<2>'s forward at 32
  EXPECT_EQ(plain(400, 32, 196), route::transposed);  // the CNN's second weight gradient
  EXPECT_EQ(plain(196, 32, 400), route::transposed);  // and its forward (32 filters)
  EXPECT_EQ(plain(4096, 2, 4096), route::transposed);  // however large op(A) is
  EXPECT_EQ(plain(256, 33, 784), route::blocked);
  // whatever its shape, op(A) in half of this CPU's L2 (or op(B)ᵀ, for Cᵀ): read from there once per chunk
  // of columns (with AVX-512), however the operands are stored; anything the shape rules take, they still take
  const index half_l2 = kiln::detail::small_gemm::l2_operand_floats();
  const route in_l2 = Ops::l2_operand_in_place ? route::direct : route::blocked;
  const route in_l2_transposed = Ops::l2_operand_in_place ? route::transposed : route::blocked;
  const index rows = 300, deep = half_l2 / rows, wide = 5000;
  ASSERT_EQ(plain(rows, wide, deep), route::blocked);
  ASSERT_EQ(plain(wide, rows, deep), route::blocked);
  EXPECT_EQ(choose<Ops>(rows, wide, deep), in_l2);
  EXPECT_EQ(choose<Ops>(rows, wide, deep + 1), route::blocked);  // op(A) and op(B)ᵀ too large to reread
  EXPECT_EQ(choose<Ops>(half_l2 / deep + 1, wide, deep), route::blocked);
  EXPECT_EQ(choose<Ops>(wide, rows, deep), in_l2_transposed);
  EXPECT_EQ(choose<Ops>(wide, rows, deep + 1), route::blocked);
  EXPECT_EQ(choose<Ops>(wide, half_l2 / deep + 1, deep), route::blocked);
  EXPECT_EQ(choose<Ops>(rows, rows, deep), in_l2);  // both fit: C as it is stored
  EXPECT_EQ(choose<Ops>(10, 64, 128), route::transposed);
  EXPECT_EQ(choose<Ops>(784, 256, 64), shallow);
  // the transformer's position-wise forward, weight and input gradients (64 wide, 256 in the MLP block,
  // 2048 positions) and the MLP's first forward product at 64, with AVX-512, by this CPU's L2 (directly where
  // op(A) fits, else as Cᵀ where op(B)ᵀ does: 256 × 64 × 784 is Cᵀ with 1 MiB, direct with 2 MiB)
  const auto by_l2 = [&](index m, index n, index k) {
    return m * k <= half_l2 ? in_l2 : n * k <= half_l2 ? in_l2_transposed : route::blocked;
  };
  for (const auto& [m, n, k] : {std::array<index, 3>{256, 2048, 64}, {64, 2048, 256}, {64, 192, 2048},
                                {256, 64, 2048}, {256, 64, 784}}) {
    ASSERT_EQ(plain(m, n, k), route::blocked);
    EXPECT_EQ(choose<Ops>(m, n, k), by_l2(m, n, k)) << m << " x " << n << " x " << k;
  }
}

#if defined(__AVX512F__)
TEST(gemm, avx512_small_products_sum_in_kilns_order_bit_for_bit) {
  check_small_bits<kiln::detail::avx512::small_ops>();
  check_small_routes<kiln::detail::avx512::small_ops>();
  check_small_conversions<kiln::detail::avx512::small_ops>();
}
#endif
#if defined(__AVX2__) && defined(__FMA__)
TEST(gemm, avx2_small_products_sum_in_kilns_order_bit_for_bit) {
  check_small_bits<kiln::detail::avx2::small_ops>();
  check_small_routes<kiln::detail::avx2::small_ops>();
  check_small_conversions<kiln::detail::avx2::small_ops>();
}
#endif

TEST(gemm, blocking_follows_the_cpu_caches) {
  using kiln::detail::gemm_blocks;
  // 30 % of L2 for the A block, KC = 384 deep (1,536 bytes a row), whole MR-row panels;
  // at most a quarter of L3 for the B block, whole NR-column panels, 4,096 columns at most.
  const gemm_blocks zen4 = gemm_blocks::for_caches({1 << 20, 32 << 20}, 32, 8);
  EXPECT_EQ(zen4.mc, 192);  // 314,572 bytes: 204 rows
  EXPECT_EQ(zen4.nc, 4096);
  const gemm_blocks ice_lake = gemm_blocks::for_caches({1280 << 10, 48 << 20}, 32, 8);
  EXPECT_EQ(ice_lake.mc, 256);
  const gemm_blocks small = gemm_blocks::for_caches({256 << 10, 6 << 20}, 16, 6);
  EXPECT_EQ(small.mc, 48);    // 78,643 bytes: 51 rows
  EXPECT_EQ(small.nc, 1020);  // 1,572,864 bytes: 1,024 columns
  const gemm_blocks tiny = gemm_blocks::for_caches({16 << 10, 64 << 10}, 32, 8);
  EXPECT_EQ(tiny.mc, 32);  // never less than one panel
  EXPECT_EQ(tiny.nc, 8);
  EXPECT_GT(kiln::detail::cpu_caches().l2, 0);
  EXPECT_GT(kiln::detail::cpu_caches().l3, 0);
}

TEST(gemm, cache_sizes_from_sys_by_level_and_type_not_by_index) {
  // /sys numbers a CPU's caches index0, index1, … in no promised order; each
  // names its level and type. A fake tree where index2 is the L3 and a
  // level-2 instruction cache comes before the unified L2:
  namespace fs = std::filesystem;
  // (this file is built into several test programs, which CTest may run at once: one tree each)
  const fs::path dir = fs::path(::testing::TempDir()) / ("kiln_fake_sys_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const auto cache = [&](int index, const char* level, const char* type, const char* size) {
    const fs::path d = dir / ("index" + std::to_string(index));
    fs::create_directories(d);
    std::ofstream(d / "level") << level << "\n";
    std::ofstream(d / "type") << type << "\n";
    std::ofstream(d / "size") << size << "\n";
  };
  cache(0, "2", "Instruction", "64K");
  cache(1, "1", "Data", "48K");
  cache(2, "3", "Unified", "32M");
  cache(3, "2", "Unified", "1280K");
  using kiln::detail::gemm_detail::sys_cache_bytes_of_level;
  EXPECT_EQ(sys_cache_bytes_of_level(dir.c_str(), 1), 48 << 10);
  EXPECT_EQ(sys_cache_bytes_of_level(dir.c_str(), 2), 1280 << 10);
  EXPECT_EQ(sys_cache_bytes_of_level(dir.c_str(), 3), 32 << 20);
  EXPECT_EQ(sys_cache_bytes_of_level(dir.c_str(), 4), 0) << "no such level";
  EXPECT_EQ(sys_cache_bytes_of_level((dir / "missing").c_str(), 2), 0);
  fs::remove_all(dir);
}

TEST(gemm, says_which_kernel_it_runs) {
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  EXPECT_TRUE(kiln::detail::gemm_scratch<float>::own_kernel);
#else
  EXPECT_FALSE(kiln::detail::gemm_scratch<float>::own_kernel);
#endif
  EXPECT_FALSE(kiln::detail::gemm_scratch<double>::own_kernel);
}

}  // namespace
