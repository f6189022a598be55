// kiln/detail/lane_sum.hpp — sums in one fixed order whatever the CPU, fast
// enough for the inner loops of element-wise layers and for bias gradients
// (Eigen's `.sum()` picks its order from the target's packet size, so an
// AVX2 build and an AVX-512 one would round a bias gradient differently).
//
// A running sum `s += f(i)` is one chain of dependent additions (4 cycles
// each), and the compiler may not reorder it. Here term i goes to lane
// i mod 16, each lane sums its terms in order, then the 16 lanes are added
// pairwise (8, 4, 2, 1 apart). The compiler vectorises the lanes with
// whatever width the target has (one zmm, two ymm, four xmm): every width
// performs these same additions, so the bits do not depend on the CPU kind.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>

namespace kiln::detail {

/// Σ f(i) for i < n, in the fixed order above.
template <class T, class F>
T lane_sum(std::size_t n, F&& f) {
  T lane[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (std::size_t j = 0; j < 16; ++j) lane[j] += f(i + j);
  for (std::size_t j = 0; i + j < n; ++j) lane[j] += f(i + j);
  for (std::size_t half = 8; half > 0; half /= 2)
    for (std::size_t j = 0; j < half; ++j) lane[j] += lane[j + half];
  return lane[0];
}

/// out[i] (+)= Σ_j y[i + j·rows] for i < rows, j < cols (the row sums of a
/// column-major rows × cols block: a bias gradient summed over the batch),
/// each row's terms added in column order, starting from column 0, and the
/// sum then added to out[i] when `add`. The loop runs along rows, so the
/// compiler vectorises across them at any width with these same additions.
template <class T>
void row_sums(const T* y, std::size_t rows, std::size_t cols, T* out, bool add) {
  constexpr std::size_t block = 64;
  for (std::size_t i0 = 0; i0 < rows; i0 += block) {
    const std::size_t len = std::min(block, rows - i0);
    T s[block];
    for (std::size_t i = 0; i < len; ++i) s[i] = cols > 0 ? y[i0 + i] : T(0);
    for (std::size_t j = 1; j < cols; ++j) {
      const T* col = y + i0 + j * rows;
      for (std::size_t i = 0; i < len; ++i) s[i] += col[i];
    }
    for (std::size_t i = 0; i < len; ++i) out[i0 + i] = add ? out[i0 + i] + s[i] : s[i];
  }
}

}  // namespace kiln::detail
