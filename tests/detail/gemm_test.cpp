// kiln's GEMM (its AVX-512 kernel where the target has it, Eigen's kernel
// otherwise) against a plain triple loop in double, over shapes that hit
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

#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <vector>

namespace {
using kiln::detail::index;

/// n floats that end right before a page with no access (or, with
/// `at_start`, begin right after one); unmapped when it goes out of scope.
class guarded_floats {
 public:
  guarded_floats(std::size_t n, bool at_start) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    const std::size_t data_pages = (n * sizeof(float) + page - 1) / page + 1;
    bytes_ = (data_pages + 2) * page;
    base_ = static_cast<char*>(mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base_ == MAP_FAILED) std::abort();
    mprotect(base_, page, PROT_NONE);
    mprotect(base_ + (data_pages + 1) * page, page, PROT_NONE);
    data_ = reinterpret_cast<float*>(at_start ? base_ + page : base_ + (data_pages + 1) * page - n * sizeof(float));
    size_ = n;
  }
  guarded_floats(const guarded_floats&) = delete;
  guarded_floats& operator=(const guarded_floats&) = delete;
  ~guarded_floats() { munmap(base_, bytes_); }
  float* begin() { return data_; }
  float* end() { return data_ + size_; }
  float* data() { return data_; }
  float& operator[](std::size_t i) { return data_[i]; }

 private:
  char* base_;
  std::size_t bytes_, size_;
  float* data_;
};

template <bool TransA, bool TransB>
void check(index m, index n, index k, bool accumulate, std::uint64_t seed) {
  kiln::rng g(seed);
  const index lda = (TransA ? k : m) + 3, ldb = (TransB ? n : k) + 1, ldc = m + 5;
  // (exactly up to the last element: the padding after the last column is not there)
  const auto extent = [](index ld, index rows, index cols) {
    return static_cast<std::size_t>(rows == 0 || cols == 0 ? 0 : ld * (cols - 1) + rows);
  };
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

TEST(gemm, says_which_kernel_it_runs) {
#if defined(__AVX512F__)
  EXPECT_TRUE(kiln::detail::gemm_scratch<float>::own_kernel);
#else
  EXPECT_FALSE(kiln::detail::gemm_scratch<float>::own_kernel);
#endif
  EXPECT_FALSE(kiln::detail::gemm_scratch<double>::own_kernel);
}

}  // namespace
