// kiln/bf16.hpp — bfloat16: the top half of an IEEE f32.
//
// WHAT IT IS
//   `kiln::bf16` holds 16 bits: f32's sign, its 8-bit exponent (so the same
//   range, 1e-38 … 3e38) and the top 7 bits of its 23-bit mantissa (8 bits of
//   precision counting the implicit one: a relative rounding error of at most
//   2⁻⁸). It is what TPUs multiply in and what this CPU's AVX512-BF16
//   instructions (vdpbf16ps: pairs of bf16 products summed into f32) take.
//
//   Conversion from f32 rounds to nearest, ties to even; a NaN stays a NaN
//   (quiet, sign kept) rather than rounding into an infinity; ±∞ and ±0 are
//   exact. Conversion to f32 is exact.
//
//   `precision<bf16>` in compile<...> (kiln/compile.hpp) trains with f32
//   master weights, bf16 activations and bf16 GEMM operands; see
//   docs/precision.md.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <bit>
#include <cstdint>

#include <kiln/detail/build_target.hpp>  // (native_bf16_products depends on the target)

namespace kiln {

struct bf16 {
  std::uint16_t bits = 0;

  /// The bf16 nearest to `f` (ties to even; NaN stays NaN).
  static constexpr bf16 from(float f) noexcept {
    const auto u = std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0)  // NaN: keep it one, quiet
      return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
    const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
    return bf16{static_cast<std::uint16_t>((u + rounding) >> 16)};
  }
  /// Exact.
  constexpr explicit operator float() const noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  friend constexpr bool operator==(bf16, bf16) noexcept = default;
};

/// True where the compiler targets AVX512-BF16: bf16 products run on the
/// CPU's pairwise dot products, for which a precision<bf16> program keeps a
/// bf16 copy of its weights (elsewhere they are rounded as they are packed).
inline constexpr bool native_bf16_products =
#if defined(__AVX512BF16__)
    true;
#else
    false;
#endif

/// `f` rounded to the nearest bf16 value, as an f32.
constexpr float round_to_bf16(float f) noexcept { return static_cast<float>(bf16::from(f)); }

}  // namespace kiln
