// conv2d's fold-back (kiln/detail/unfold.hpp's gather_taps): each lane adds
// its taps' values in tap order from zero, the scalar fold-back's order, so
// the input gradient has the same bits on every CPU; and gathering 2 to 4
// rows at once (each reading one output row further) gives every row the
// bits it gets alone. And the unfold's row step (copy_window) for bf16
// activations: the window's run of the row, zeros around it.
#include <kiln/fwd.hpp>

#include <kiln/bf16.hpp>
#include <kiln/detail/unfold.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#if defined(KILN_DETAIL_GATHER_TAPS)
namespace {
using kiln::detail::tap_run;

TEST(unfold, gathered_rows_add_their_taps_in_order_bit_for_bit) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::ptrdiff_t width : {5, 14, 16, 17, 28, 37}) {
    for (std::ptrdiff_t kernel : {1, 3, 5}) {
      const std::ptrdiff_t pad = kernel / 2, out_width = width;  // 'same'
      const std::ptrdiff_t in_step = out_width + 3;               // the output rows of one tap, apart
      std::vector<float> runs(static_cast<std::size_t>(kernel * kernel * in_step * 4 + 64));
      for (float& v : runs) v = u(rng) * 1000.0f;  // (magnitudes apart: the order of the sums shows in the bits)
      std::vector<tap_run> taps;
      for (std::ptrdiff_t t = 0; t < kernel * kernel; ++t) {
        const std::ptrdiff_t v = t % kernel, shift = v - pad;
        const std::ptrdiff_t first = shift < 0 ? -shift : 0, last = shift > 0 ? out_width - shift : out_width;
        taps.push_back({runs.data() + t * in_step * 4, shift, first, last});
      }
      for (std::ptrdiff_t rows = 1; rows <= 4; ++rows) {
        const std::ptrdiff_t out_step = width + 2;
        std::vector<float> out(static_cast<std::size_t>(out_step * 4), -7.0f);
        kiln::detail::gather_taps(taps.data(), static_cast<std::ptrdiff_t>(taps.size()), width, out.data(), rows,
                                  in_step, out_step);
        for (std::ptrdiff_t row = 0; row < 4; ++row)
          for (std::ptrdiff_t q = 0; q < out_step; ++q) {
            const float got = out[static_cast<std::size_t>(row * out_step + q)];
            if (row >= rows || q >= width) {
              EXPECT_EQ(got, -7.0f) << "wrote outside: row " << row << " q " << q;
              continue;
            }
            float want = 0.0f;
            for (const tap_run& r : taps) {
              const std::ptrdiff_t j = q - r.shift;
              if (j >= r.first && j < r.last) want += r.in[row * in_step + j];
            }
            EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
                << "width " << width << " kernel " << kernel << " rows " << rows << " row " << row << " q " << q;
          }
      }
    }
  }
}

}  // namespace
#endif

namespace {

/// copy_window against its definition, for every window of a row of each
/// length (the padding, the run, the windows wholly outside), in f32 and
/// bf16: out[j] = row[j + shift] inside [first, last), zero elsewhere in
/// [0, n), nothing written at or past `room` (n, or further: what the
/// unfold lets it overwrite), nothing read outside the window (the row is
/// surrounded by NaN: a read outside it would show).
template <class T>
void check_copy_window() {
  const auto as_t = [](float v) {
    if constexpr (std::is_same_v<T, float>) {
      return v;
    } else {
      return T::from(v);
    }
  };
  for (std::ptrdiff_t n : {1, 5, 7, 8, 9, 14, 16, 17, 28, 31, 33, 40}) {
    for (std::ptrdiff_t pad : {0, 1, 2, 3, 9}) {
      for (std::ptrdiff_t extra : {0, 1, 5, 16, 40}) {
        const std::ptrdiff_t width = n, room = n + extra;  // 'same' rows: the input row is as wide as the output
        std::vector<T> buffer(static_cast<std::size_t>(width + 64), as_t(std::numeric_limits<float>::quiet_NaN()));
        T* row = buffer.data() + 32;
        for (std::ptrdiff_t q = 0; q < width; ++q) row[q] = as_t(static_cast<float>(q + 1));
        for (std::ptrdiff_t v = 0; v <= 2 * pad; ++v) {
          const std::ptrdiff_t shift = v - pad;
          const std::ptrdiff_t first = std::max<std::ptrdiff_t>(0, -shift),
                               last = std::max(first, std::min(n, width - shift));
          std::vector<T> out(static_cast<std::size_t>(room + 8), as_t(-7.0f));
          kiln::detail::copy_window(row, shift, first, last, n, out.data(), room);
          for (std::ptrdiff_t j = 0; j < n; ++j) {
            const float want = j >= first && j < last ? static_cast<float>(j + shift + 1) : 0.0f;
            ASSERT_EQ(static_cast<float>(out[static_cast<std::size_t>(j)]), want)
                << "n " << n << " pad " << pad << " shift " << shift << " room " << room << " j " << j;
          }
          for (std::ptrdiff_t j = room; j < room + 8; ++j)
            ASSERT_EQ(static_cast<float>(out[static_cast<std::size_t>(j)]), -7.0f) << "wrote past room = " << room;
        }
      }
    }
  }
}

TEST(unfold, a_window_is_its_run_of_the_row_and_zeros) {
  check_copy_window<float>();
  check_copy_window<kiln::bf16>();
}

}  // namespace
