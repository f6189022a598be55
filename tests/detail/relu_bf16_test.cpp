// relu on bf16 activations (kiln/detail/relu_bf16.hpp), on every one of the
// 65,536 bf16 values: the forward gives the input's own bits for x ≥ 0 (−0
// and +∞ included), +0 for x < 0, the quiet NaN kiln::bf16::from makes of a
// NaN; the backward passes dy through where y > 0 and gives +0 elsewhere.
// Array lengths 1…70 at six offsets cross the whole vectors (16 and 32
// values) and their masked tails. (Relu layers use these where they run on
// vectors; elsewhere the scalar loop is tested here.)
#include <kiln/fwd.hpp>

#include <kiln/bf16.hpp>
#include <kiln/detail/relu_bf16.hpp>

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace {
using kiln::bf16;

std::uint16_t expected_relu(std::uint16_t bits) {
  const float v = static_cast<float>(bf16{bits});
  if (std::isnan(v)) return bf16::from(v).bits;  // quiet, sign and payload kept
  return v < 0 ? std::uint16_t{0} : bits;
}

std::vector<bf16> every_bf16_value() {
  std::vector<bf16> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) all[i].bits = static_cast<std::uint16_t>(i);
  return all;
}

TEST(relu_bf16, forward_of_every_value_is_its_own_bits_zero_or_a_quiet_nan) {
  const std::vector<bf16> x = every_bf16_value();
  std::vector<bf16> y(x.size());
  kiln::detail::relu_bf16(x.data(), x.size(), y.data());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i].bits, expected_relu(x[i].bits)) << std::hex << i;
  EXPECT_EQ(y[0x8000].bits, 0x8000);  // −0 stays −0 (max(−0, 0) in f32 gave −0)
  EXPECT_EQ(y[0xFF80].bits, 0x0000);  // −∞
  EXPECT_EQ(y[0x7F80].bits, 0x7F80);  // +∞
  EXPECT_EQ(y[0x7F81].bits, 0x7FC1);  // a signalling NaN comes out quiet
  EXPECT_EQ(y[0x0001].bits, 0x0001);  // the smallest subnormal is kept
}

TEST(relu_bf16, backward_of_every_value_passes_dy_where_y_is_positive) {
  const std::vector<bf16> y = every_bf16_value();
  std::vector<float> dy(y.size()), dx(y.size());
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = 0.25f * static_cast<float>(i) - 5000.0f;
  dy[7] = std::numeric_limits<float>::quiet_NaN();  // y = 7 (a subnormal > 0): passed on
  kiln::detail::relu_bf16_backward(y.data(), dy.data(), y.size(), dx.data());
  for (std::size_t i = 0; i < y.size(); ++i) {
    const float want = static_cast<float>(y[i]) > 0 ? dy[i] : 0.0f;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(dx[i]), std::bit_cast<std::uint32_t>(want)) << std::hex << i;
  }
  EXPECT_TRUE(std::isnan(dx[7]));
}

TEST(relu_bf16, whole_vectors_and_tails_of_every_length_and_offset) {
  const std::vector<bf16> all = every_bf16_value();
  for (std::size_t n = 1; n <= 70; ++n)
    for (std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{31}, std::size_t{0x7F70},
                               std::size_t{0xFF70}}) {
      // ends written past n would show in the guard values around the output
      std::vector<bf16> y(n + 2, bf16{0x1234});
      std::vector<float> dy(n), dx(n + 2, -7.0f);
      for (std::size_t i = 0; i < n; ++i) dy[i] = static_cast<float>(i) + 0.5f;
      kiln::detail::relu_bf16(all.data() + offset, n, y.data() + 1);
      kiln::detail::relu_bf16_backward(all.data() + offset, dy.data(), n, dx.data() + 1);
      EXPECT_EQ(y.front().bits, 0x1234);
      EXPECT_EQ(y.back().bits, 0x1234) << n;
      EXPECT_EQ(dx.front(), -7.0f);
      EXPECT_EQ(dx.back(), -7.0f) << n;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t x = all[offset + i].bits;
        ASSERT_EQ(y[i + 1].bits, expected_relu(x)) << n << " values from " << offset << ", value " << i;
        ASSERT_EQ(dx[i + 1], static_cast<float>(bf16{x}) > 0 ? dy[i] : 0.0f) << n << " from " << offset;
      }
    }
}

}  // namespace
