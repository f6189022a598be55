// kiln/gemm.hpp — the matrix product a layer of your own may run: the one
// kiln's dense and conv2d run (kiln's AVX-512 or AVX2 kernel, the same bits
// on either; AVX512-BF16 under precision<bf16>; Eigen's on older CPUs and
// for double), with no allocation during a step.
//
//   template <std::size_t B, class T>
//   static void reserve(kiln::gemm_scratch<T>& g) {    // member::reserve
//     g.reserve(m, n, k);                              // each product's shape, once
//   }
//   ...
//   ctx.gemm->template run<TransA, TransB>(m, n, k, a, lda, b, ldb, c, ldc, accumulate);
//
// run: C(m×n, leading dimension ldc) = op(A)·op(B), plus C when
// `accumulate`; all column-major (an activation block is features × batch,
// one sample per column); op(A) is m×k (Aᵀ when TransA), op(B) k×n. An
// operand may be the context's `gemm_param<Tag>()` (under precision<bf16>,
// bf16 where the CPU has AVX512-BF16, else the f32 weight, which the
// product rounds to bf16: take it with `auto`) or an activation; C is the
// context's scalar. Every shape
// run must have been reserved (examples/custom_layer.hpp: project<Units>).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <kiln/detail/gemm.hpp>

namespace kiln {

/// The packing space of a replica's products, and the product itself (run).
template <class T>
using gemm_scratch = detail::gemm_scratch<T>;

}  // namespace kiln
