// kiln/detail/sgemm_avx512_bf16_values.hpp — kiln's GEMM with bf16
// operands on AVX-512 targets WITHOUT AVX512-BF16 (Ice Lake, Skylake-SP,
// Zen 4 built for them): the f32 blocking, packing and micro-kernel of
// detail/sgemm_avx512.hpp over the operands' bf16 values, which the packing
// makes as it goes: a bf16 operand (a bf16 program's activations, the
// step's copy of the weights) is widened exactly, an f32 one (a gradient)
// is rounded to the nearest bf16 (kiln::bf16::from, lane by lane). Products
// are exact in f32 and sums are f32.
//
// Before, such targets rounded both operands into f32 copies first (a pass
// over each, element by element) and then ran the f32 product, which packs
// them again: precision<bf16> was slower than f32 there. Packing from bf16
// reads half the bytes. The values multiplied and the order of every sum
// are those of the copies' product, so the bits are the same.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <kiln/bf16.hpp>
#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/sgemm_avx512.hpp>

#if defined(__AVX512F__) && defined(__AVX512BW__) && !defined(__AVX512BF16__)

#include <cstddef>

KILN_AVX512_BEGIN

namespace kiln::detail {

/// An f32 operand read through bf16_rounded_f32 (detail/bf16_arrays.hpp):
/// each value rounded to bf16 as it is loaded. (In bf16_rounded_f32's own
/// namespace: the packing templates, declared before these, find them by
/// argument-dependent lookup.)
inline __m512 load16(const bf16_rounded_f32* p) {
  return bf16_values_of(_mm512_loadu_ps(reinterpret_cast<const float*>(p)));
}
inline __m512 load16(const bf16_rounded_f32* p, __mmask16 m) {
  return bf16_values_of(_mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(p)));
}

}  // namespace kiln::detail

namespace kiln::detail::avx512 {

/// The f32 products' packing and micro-kernel, for any operand the packing
/// can read (float, bf16, bf16_rounded_f32).
struct bf16_value_ops : f32_ops {
  template <bool TransA, class Src>
  static void pack_a(const Src* a, std::ptrdiff_t lda, std::ptrdiff_t mc, std::ptrdiff_t kc, float* out) {
    avx512::pack_a<TransA>(a, lda, mc, kc, out);
  }
  template <bool TransB, class Src>
  static void pack_b(const Src* b, std::ptrdiff_t ldb, std::ptrdiff_t kc, std::ptrdiff_t nc, float* out) {
    avx512::pack_b<TransB>(b, ldb, kc, nc, out);
  }
};

/// C(m×n, ldc) += op(A)·op(B) over the operands' bf16 values (= with
/// `overwrite`; then k ≥ 1); pa and pb hold packed_a_floats(m, k) and
/// packed_b_floats(n, k) floats, 64-byte aligned.
template <bool TransA, bool TransB, class SA, class SB>
void gemm_bf16_values(std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const SA* a, std::ptrdiff_t lda,
                      const SB* b, std::ptrdiff_t ldb, float* c, std::ptrdiff_t ldc, float* pa, float* pb,
                      bool overwrite) {
  const auto* va = as_bf16_values(a);
  const auto* vb = as_bf16_values(b);
  blocked_gemm<bf16_value_ops, TransA, TransB>(m, n, k, va, lda, vb, ldb, c, ldc, pa, pb, overwrite, cpu_blocks());
}

}  // namespace kiln::detail::avx512

KILN_AVX512_END

#endif
