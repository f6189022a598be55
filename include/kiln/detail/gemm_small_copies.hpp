// kiln/detail/gemm_small_copies.hpp — the copies the small products
// (detail/gemm_small.hpp) make of their operands: of one they read by
// tiles of rows when it is stored transposed, column-major, W × W blocks
// transposed in registers; and, when the product takes its operands'
// values converted (the bf16 products without AVX512-BF16 take them
// rounded to bf16 values, or widened from bf16: detail/gemm.hpp), the
// converted values, made as the transposed copy is, or first, in long
// runs, in the operand's layout (in_layout).
//
// A conversion is a function object called on one value (convert(v), a
// float) and on a run of them (convert(src, count, dst)); `as_is`, the
// default, is the f32 products' own floats.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace kiln::detail::small_gemm {

/// Values copied as they are: the f32 products' conversion.
struct as_is {
  float operator()(float v) const noexcept { return v; }
  void operator()(const float* src, std::ptrdiff_t count, float* dst) const noexcept {
    std::copy(src, src + count, dst);
  }
};

/// out[i + p·ld_out] = convert(a[p + i·lda]) for i < rows, p < depth (a
/// transposed operand copied column-major), W × W blocks transposed in
/// registers (converted first, a block's rows at a time into L1, unless
/// `as_is`); the rows from `rows` to ld_out are zero.
template <class Ops, class S, class Convert = as_is>
void copy_transposed(const S* a, std::ptrdiff_t lda, std::ptrdiff_t rows, std::ptrdiff_t depth, float* out,
                     std::ptrdiff_t ld_out, Convert convert = {}) {
  constexpr std::ptrdiff_t W = Ops::W;
  const std::ptrdiff_t whole_rows = rows / W * W, whole_depth = depth / W * W;
  for (std::ptrdiff_t i = 0; i < whole_rows; i += W)
    for (std::ptrdiff_t p = 0; p < whole_depth; p += W) {
      if constexpr (std::is_same_v<Convert, as_is>) {
        Ops::transpose(a + p + i * lda, lda, out + i + p * ld_out, ld_out);
      } else {
        alignas(64) float block[W * W];  // block[r·W + q]: op(A)(i + r, p + q), converted
        for (std::ptrdiff_t r = 0; r < W; ++r) convert(a + p + (i + r) * lda, W, block + r * W);
        Ops::transpose(block, W, out + i + p * ld_out, ld_out);
      }
    }
  if (whole_rows == ld_out && whole_depth == depth) return;
  for (std::ptrdiff_t p = 0; p < depth; ++p) {  // (the edges)
    float* col = out + p * ld_out;
    for (std::ptrdiff_t i = p < whole_depth ? whole_rows : 0; i < rows; ++i) col[i] = convert(a[p + i * lda]);
    std::fill(col + rows, col + ld_out, 0.0f);
  }
}

/// True when an operand of S converted by Convert is its own floats: a
/// route reads it where it is.
template <class S, class Convert>
inline constexpr bool reads_in_place = std::is_same_v<S, float> && std::is_same_v<Convert, as_is>;

/// op(X) (rows × cols; stored cols × rows when Trans) where it is, when it
/// is its own floats, or else converted into copy + at, dense in the same
/// layout: the floats, and their leading dimension. (`copy` is used only
/// then: the f32 products pass none.)
template <bool Trans, class S, class Convert>
std::pair<const float*, std::ptrdiff_t> in_layout(std::ptrdiff_t rows, std::ptrdiff_t cols, const S* x,
                                                  std::ptrdiff_t ldx, float* copy, std::ptrdiff_t at,
                                                  Convert convert) {
  if constexpr (reads_in_place<S, Convert>) {
    return {x, ldx};
  } else {
    float* const out = copy + at;
    const std::ptrdiff_t r = Trans ? cols : rows, stored_cols = Trans ? rows : cols;
    if (ldx == r) {
      convert(x, r * stored_cols, out);  // (contiguous: one run)
    } else {
      for (std::ptrdiff_t j = 0; j < stored_cols; ++j) convert(x + j * ldx, r, out + j * r);
    }
    return {out, r};
  }
}

}  // namespace kiln::detail::small_gemm
