// kiln/detail/bf16_value_table.hpp — an element function's results for the
// bf16 values, looked up instead of computed.
//
// WHY   A bf16 program's activations are bf16: an element-wise layer sees
//       them widened to f32, so its input takes one of 2¹⁶ values. For a
//       function whose f32 kernel is dear (GELU: erf's two polynomials and
//       an exponential; its derivative: one more exponential), a table of
//       the kernel's own results over the values that occur, read 16 (or 8)
//       lanes at a time by one gather, gives the same bits for a fraction of
//       the arithmetic — most where the CPU has no AVX512-BF16 to make the
//       products cheap instead.
// WHAT  `bf16_value_table` holds f(x) for every bf16 value x with
//       2⁻¹⁶ ≤ |x| < 2⁴ (twenty binades of 128 values, both signs: 5120
//       floats, 20 KiB), each computed by the kernel itself when the table is
//       built. `lookup` returns f(x) for a pack of x: the table's entry where
//       x is such a value, the kernel's result elsewhere (±0, |x| outside the
//       range, ∞, NaN, and any f32 that is not a bf16 value), lane by lane —
//       so it has the bits of the kernel for every input, whatever the pack.
// COST  one gather per pack; the kernel as well for a pack with a lane
//       outside the table: rare among a network's activations, but always
//       for an array's last, partial pack (its lanes past the end are 0).
// FP ENVIRONMENT  the table is built once, by whichever thread first needs
//       it, under the default MXCSR (no flush-to-zero, no denormals-are-zero,
//       round to nearest), whatever that thread's setting: its entries are
//       the kernel's results in the default environment.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>

#include <kiln/detail/vector_packs.hpp>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

KILN_AVX512_BEGIN

namespace kiln::detail::vmath {

struct bf16_value_table {
  static constexpr std::uint32_t first = 111u << 7;  ///< 2⁻¹⁶'s bf16 bits (exponent field 111)
  static constexpr std::uint32_t count = 20u << 7;   ///< twenty binades, per sign
  alignas(64) float at[2 * count];                   ///< [+x from 2⁻¹⁶ up | −x likewise]

  /// The bf16 value of entry i (i < 2·count).
  static float value(std::uint32_t i) noexcept {
    const std::uint32_t sign = i < count ? 0u : 0x80000000u;
    return std::bit_cast<float>(sign | ((first + i % count) << 16));
  }

  /// The table of `kernel` (a callable taking and returning a native_pack::v).
  template <class Kernel>
  explicit bf16_value_table(Kernel kernel) noexcept {
    using P = native_pack;
#if defined(__SSE__)
    const unsigned caller = _mm_getcsr();
    _mm_setcsr(0x1F80);  // the default: all exceptions masked, nearest, no FTZ / DAZ
#endif
    for (std::uint32_t i = 0; i < 2 * count; ++i) at[i] = value(i);
    for (std::uint32_t i = 0; i < 2 * count; i += P::width) P::store(at + i, kernel(P::load(at + i, P::width)), P::width);
    static_assert((2 * count) % 16 == 0);
#if defined(__SSE__)
    _mm_setcsr(caller);
#endif
  }

  /// f(x) for a pack x: the entry where x has one, else `kernel(x)` (the
  /// same kernel the table was built with, on pack P).
  template <class P, class Kernel>
  typename P::v lookup(typename P::v x, Kernel kernel) const noexcept {
    typename P::mask found;
    const typename P::v r = P::lookup_bf16(at, x, first, count, found);
    return P::all(found) ? r : P::select(found, r, kernel(x));
  }
};

}  // namespace kiln::detail::vmath

KILN_AVX512_END
