// kiln/detail/lane_sum.hpp — a sum of n terms in one fixed order whatever
// the CPU, fast enough for the inner loops of element-wise layers.
//
// A running sum `s += f(i)` is one chain of dependent additions (4 cycles
// each), and the compiler may not reorder it. Here term i goes to lane
// i mod 16, each lane sums its terms in order, then the 16 lanes are added
// pairwise (8, 4, 2, 1 apart). The compiler vectorises the lanes with
// whatever width the target has (one zmm, two ymm, four xmm): every width
// performs these same additions, so the bits do not depend on the CPU kind.
#pragma once
#include <kiln/detail/internal_header.hpp>

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

}  // namespace kiln::detail
