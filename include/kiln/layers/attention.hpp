// kiln/layers/attention.hpp — causal multi-head self-attention.
//
// WHAT IT COMPUTES   for a sequence x of L positions of width D, with
//                    H = Heads heads of width d = D / H (PyTorch's
//                    nn.MultiheadAttention(D, H) with a causal mask):
//                      [q k v] = x·W_inᵀ + b_in          (each L × D)
//                      per head h:  P_h = softmax(q_h·k_hᵀ / √d + M),
//                                   M[i][j] = −∞ for j > i (no looking ahead)
//                                   o_h = P_h · v_h
//                      y = [o_1 … o_H]·W_outᵀ + b_out
// SHAPE CONTRACT     input shape<L, D> → output shape<L, D>; parameters
//                    W_in shape<3D, D>, b_in shape<3D> (zeros), W_out
//                    shape<D, D>, b_out shape<D> (zeros), in this order
//                    (nn.MultiheadAttention's in_proj_weight, in_proj_bias,
//                    out_proj.weight, out_proj.bias).
// REQUIREMENTS       rank-2 input; Heads ≥ 1 and Heads divides D.
// MEMORY             keeps q, k, v, the attention probabilities (H·L·L per
//                    sample) and the heads' outputs for backward: the cost of
//                    a static sequence length is known at compile time
//                    (Model::memory_plan<B>::saved_bytes).
// COST               per sample and head, six products of L × L × d (scores,
//                    weights·v, and four in backward); the mask's upper
//                    triangle is skipped a quarter at a time (queries before
//                    L/2 against keys before L/2 only), so they do ¾ of the
//                    multiply-adds of full L × L products. (So an ∞ or
//                    NaN in a later key or value no longer reaches an
//                    earlier query as 0·∞; it reaches its own position.)
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <type_traits>

#include <kiln/detail/lane_sum.hpp>
#include <kiln/detail/layer_context.hpp>
#include <kiln/detail/vector_math.hpp>
#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

namespace diagnostics {
template <class LayerAt, class InputShape>
inline constexpr bool attention_input_must_be_a_sequence_shape_L_D = InputShape::rank == 2;
template <class LayerAt, std::size_t Width, std::size_t Heads>
inline constexpr bool attention_heads_must_divide_the_width = Heads > 0 && Width % Heads == 0;
}  // namespace diagnostics

template <std::size_t Heads>
struct causal_self_attention {
  using kiln_layer = void;
  static std::string name() { return "causal_self_attention<" + std::to_string(Heads) + ">"; }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<causal_self_attention, In, Position> {
    using provides = kiln::provides<member::saved, member::workspace, member::reserve>;
    static constexpr std::size_t L = In::rank == 2 ? In::extent(0) : 1;
    static constexpr std::size_t D = In::size / L;
    // Its checks: one error each, and the class stays whole (see bound_layer_base::accepted).
    static constexpr bool accepted = [] {
      static_assert(
          diagnostics::attention_input_must_be_a_sequence_shape_L_D<layer_at<Position, causal_self_attention>, In>,
          "kiln::causal_self_attention: the input must be a sequence shape<L, D> (rank 2)");
      static_assert(
          diagnostics::attention_heads_must_divide_the_width<layer_at<Position, causal_self_attention>, D, Heads>,
          "kiln::causal_self_attention<Heads>: Heads must divide the width D of the input shape<L, D>");
      return diagnostics::attention_input_must_be_a_sequence_shape_L_D<layer_at<Position, causal_self_attention>, In> &&
             diagnostics::attention_heads_must_divide_the_width<layer_at<Position, causal_self_attention>, D, Heads>;
    }();
    static_assert(accepted || true);  // (it reports, once)
    static constexpr std::size_t H = Heads > 0 && D % Heads == 0 ? Heads : 1;
    static constexpr std::size_t dh = D / H;
    using output_shape = In;

    using in_weight = detail::auto_tag<Position, 0>;
    using in_bias = detail::auto_tag<Position, 1>;
    using out_weight = detail::auto_tag<Position, 2>;
    using out_bias = detail::auto_tag<Position, 3>;
    using parameters = param_list<
        param<in_weight, shape<3 * D, D>, init::glorot_uniform>, param<in_bias, shape<3 * D>, init::zeros>,
        param<out_weight, shape<D, D>, init::glorot_uniform>, param<out_bias, shape<D>, init::zeros>>;

    static constexpr std::size_t align(std::size_t n) { return (n + 15) / 16 * 16; }
    // saved: [q k v: 3D × L·B | probabilities: H·L·L per sample | heads' outputs: D × L·B]
    template <std::size_t B>
    static constexpr std::size_t probabilities_at = align(3 * D * L * B);
    template <std::size_t B>
    static constexpr std::size_t heads_at = probabilities_at<B> + align(H* L* L* B);
    template <std::size_t B>
    static constexpr std::size_t saved = heads_at<B> + align(D* L* B);
    // workspace: [dO: D × L·B | d[q k v]: 3D × L·B | dP: L × L]
    template <std::size_t B>
    static constexpr std::size_t workspace = align(D* L* B) + align(3 * D * L * B) + align(L* L);

    // The causal products skip what the mask makes zero: queries before s
    // (the first half) look at keys before s only, so each product over
    // keys × queries is two: the s × s corner, and all keys × the queries
    // from s. The skipped quarter is masked anyway (scores, dP) or adds
    // exact zeros (P·v, dS·k, and in Pᵀ and dSᵀ the keys from s, which the
    // queries before s do not see).
    static constexpr std::size_t s = L / 2;
    static constexpr auto si = static_cast<detail::index>(s), Li = static_cast<detail::index>(L),
                          di = static_cast<detail::index>(dh);

    template <std::size_t B, class T>
    static void reserve(detail::gemm_scratch<T>& g) {
      constexpr auto n = static_cast<detail::index>(L * B);
      g.reserve(3 * D, n, D);
      g.reserve(si, si, di);            // scores, dP: the corner
      g.reserve(Li, Li - si, di);       // scores, dP: the queries from s
      g.reserve(di, si, si);            // P·v, dS·k: the corner
      g.reserve(di, Li - si, Li);       // P·v, dS·k: the queries from s
      g.reserve(di, si, Li);            // dO·Pᵀ, q·dSᵀ: keys before s
      g.reserve(di, Li - si, Li - si);  // dO·Pᵀ, q·dSᵀ: keys from s
      g.reserve(D, n, D);
      g.reserve(D, D, n);
      g.reserve(D, 3 * D, n);
      g.reserve(D, n, 3 * D);
    }

    template <class T>
    static void add_bias(T* out, const T* bias, std::size_t rows, std::size_t cols) {
      for (std::size_t j = 0; j < cols; ++j) std::copy_n(bias, rows, out + j * rows);
    }

    /// C(keys × queries, ld L) = op(X)ᵀ·Y for X, Y dh × L (ld lx, ly): the
    /// scores k·qᵀ, and dP = v·dOᵀ, where key j > query i is masked.
    template <class G, class X, class Y, class T>
    static void keys_by_queries(G& g, const X* x, detail::index lx, const Y* y, detail::index ly, T* c) {
      g.template run<true, false>(si, si, di, x, lx, y, ly, c, Li, false);
      g.template run<true, false>(Li, Li - si, di, x, lx, y + si * ly, ly, c + si * Li, Li, false);
    }
    /// C(dh × queries, ld lc) = X·M for X dh × keys (ld lx) and M keys ×
    /// queries (ld L) with M[j, i] = 0 for key j > query i (P, dS): o, dq.
    template <class G, class X, class M, class T>
    static void weighted_by_queries(G& g, const X* x, detail::index lx, const M* m, T* c, detail::index lc) {
      g.template run<false, false>(di, si, si, x, lx, m, Li, c, lc, false);
      g.template run<false, false>(di, Li - si, Li, x, lx, m + si * Li, Li, c + si * lc, lc, false);
    }
    /// C(dh × keys, ld lc) = X·Mᵀ for X dh × queries (ld lx), M as above: dv, dk.
    template <class G, class X, class M, class T>
    static void weighted_by_keys(G& g, const X* x, detail::index lx, const M* m, T* c, detail::index lc) {
      g.template run<false, true>(di, si, Li, x, lx, m, Li, c, lc, false);
      g.template run<false, true>(di, Li - si, Li - si, x + si * lx, lx, m + si + si * Li, Li, c + si * lc, lc, false);
    }

    template <class Ctx>
    static void forward(const Ctx& c) {
      using T = typename Ctx::scalar;
      constexpr std::size_t B = Ctx::batch, n = L * B;
      T* qkv = c.saved;
      T* probs = c.saved + probabilities_at<B>;
      T* heads = c.saved + heads_at<B>;
      add_bias(qkv, c.template param<in_bias>(), 3 * D, n);
      c.gemm->template run<true, false>(3 * D, n, D, c.template gemm_param<in_weight>(), D, c.x, D, qkv, 3 * D, true);
      if (rounds_operands(c)) {
        if constexpr (std::is_same_v<T, float>) {
          detail::round_values(qkv, 3 * D * n, qkv);
          attend<B>(c, qkv, probs, heads, detail::as_rounded_operand);
        }
      } else {
        attend<B>(c, qkv, probs, heads, [](const T* x) { return x; });
      }
      add_bias(c.y, c.template param<out_bias>(), D, n);
      c.gemm->template run<true, false>(D, n, D, c.template gemm_param<out_weight>(), D, heads, D, c.y, D, true);
    }

    /// With precision<bf16> the products take their operands rounded to
    /// bf16. q, k, v, dO and dS are nothing but such operands: where the
    /// CPU rounds them in software (no AVX512-BF16: gemm_scratch's
    /// packs_bf16_values), they are rounded once, where they are made, and
    /// given to the products as rounded (detail::f32_of_bf16_values), which
    /// then do not round them again, product by product, into copies: the
    /// same values. (With AVX512-BF16 the products convert them as they
    /// pack them, flushing subnormals as vcvtneps2bf16 does; rounding them
    /// first would keep those, and save nothing.)
    template <class Ctx>
    static bool rounds_operands(const Ctx& c) {
      if constexpr (std::is_same_v<typename Ctx::scalar, float>) {
        return detail::gemm_scratch<float>::packs_bf16_values && c.gemm->bf16_operands();
      } else {
        return false;
      }
    }

    /// The heads' outputs from q, k, v (`operand` gives q, k, v to the products).
    template <std::size_t B, class Ctx, class T, class Operand>
    static void attend(const Ctx& c, const T* qkv, T* probs, T* heads, Operand operand) {
      const T scale = T(1) / std::sqrt(static_cast<T>(dh));
      for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t h = 0; h < H; ++h) {
          const auto* q = operand(qkv + b * L * 3 * D + h * dh);
          const auto* k = operand(qkv + b * L * 3 * D + h * dh + D);
          const auto* v = operand(qkv + b * L * 3 * D + h * dh + 2 * D);
          T* p = probs + (b * H + h) * L * L;  // column i: query i's weights over keys j
          keys_by_queries(*c.gemm, k, 3 * D, q, 3 * D, p);  // (key j > query i: not computed, zeroed below)
          for (std::size_t i = 0; i < L; ++i) {
            T* col = p + i * L;
            // max_j (col[j]·scale) = (max_j col[j])·scale: rounding is monotonic and scale > 0
            T top = -std::numeric_limits<T>::infinity();
            if constexpr (std::is_same_v<T, float>) {
              top = detail::vmath::max_of(col, i + 1) * scale;
            } else {
              for (std::size_t j = 0; j <= i; ++j) top = std::max(top, col[j] * scale);
            }
            const T sum = detail::vmath::exp_affine_sum(col, scale, -top, i + 1, col);  // vectorised exp, summed in order
            const T inv = T(1) / sum;
            for (std::size_t j = 0; j <= i; ++j) col[j] *= inv;
            for (std::size_t j = i + 1; j < L; ++j) col[j] = T(0);
          }
          weighted_by_queries(*c.gemm, v, 3 * D, p, heads + b * L * D + h * dh, D);
        }
      }
    }

    template <class Ctx>
    static void backward(const Ctx& c) {
      using T = typename Ctx::scalar;
      constexpr std::size_t B = Ctx::batch, n = L * B;
      const T* qkv = c.saved;
      const T* probs = c.saved + probabilities_at<B>;
      const T* heads = c.saved + heads_at<B>;
      T* d_heads = c.scratch;
      T* d_qkv = c.scratch + align(D * n);
      T* d_p = d_qkv + align(3 * D * n);
      // y = W_outᶜᵀ·heads + b_out
      c.gemm->template run<false, true>(D, D, n, heads, D, c.dy, D, c.template grad<out_weight>(), D, true);
      detail::row_sums(c.dy, D, n, c.template grad<out_bias>(), true);  // (one order on every CPU)
      c.gemm->template run<false, false>(D, n, D, c.template gemm_param<out_weight>(), D, c.dy, D, d_heads, D, false);
      if (rounds_operands(c)) {
        if constexpr (std::is_same_v<T, float>) {
          detail::round_values(d_heads, D * n, d_heads);
          attend_backward<B>(c, qkv, probs, d_heads, d_qkv, d_p, detail::as_rounded_operand);
        }
      } else {
        attend_backward<B>(c, qkv, probs, d_heads, d_qkv, d_p, [](const T* x) { return x; });
      }
      c.gemm->template run<false, true>(D, 3 * D, n, c.x, D, d_qkv, 3 * D, c.template grad<in_weight>(), D, true);
      detail::row_sums(d_qkv, 3 * D, n, c.template grad<in_bias>(), true);
      if (c.dx)
        c.gemm->template run<false, false>(D, n, 3 * D, c.template gemm_param<in_weight>(), D, d_qkv, 3 * D, c.dx, D,
                                           false);
    }

    /// d[q k v] from dO, the heads' outputs' gradient (where `operand`
    /// gives rounded operands, dS is rounded to bf16 as it is made: see
    /// rounds_operands).
    template <std::size_t B, class Ctx, class T, class Operand>
    static void attend_backward(const Ctx& c, const T* qkv, const T* probs, const T* d_heads, T* d_qkv, T* d_p,
                                Operand operand) {
      constexpr bool RoundDS = !std::is_same_v<decltype(operand(qkv)), const T*>;
      const T scale = T(1) / std::sqrt(static_cast<T>(dh));
      for (std::size_t b = 0; b < B; ++b) {
        for (std::size_t h = 0; h < H; ++h) {
          const std::size_t at = b * L * 3 * D + h * dh;
          const auto* q = operand(qkv + at);
          const auto* k = operand(qkv + at + D);
          const auto* v = operand(qkv + at + 2 * D);
          const T* p = probs + (b * H + h) * L * L;
          const auto* dout = operand(d_heads + b * L * D + h * dh);
          weighted_by_keys(*c.gemm, dout, D, p, d_qkv + at + 2 * D, 3 * D);  // dv = dO·Pᵀ
          keys_by_queries(*c.gemm, v, 3 * D, dout, D, d_p);                   // dP = v·dOᵀ (where not masked)
          for (std::size_t i = 0; i < L; ++i) {  // through the softmax and the scale: dS
            const T* pc = p + i * L;
            T* dc = d_p + i * L;
            const T dot = detail::lane_sum<T>(i + 1, [&](std::size_t j) { return pc[j] * dc[j]; });
            for (std::size_t j = 0; j <= i; ++j) dc[j] = pc[j] * (dc[j] - dot) * scale;
            if constexpr (RoundDS) detail::round_values(dc, i + 1, dc);
            for (std::size_t j = i + 1; j < L; ++j) dc[j] = T(0);
          }
          const auto* ds = operand(static_cast<const T*>(d_p));
          weighted_by_keys(*c.gemm, q, 3 * D, ds, d_qkv + at + D, 3 * D);  // dk = q·dSᵀ
          weighted_by_queries(*c.gemm, k, 3 * D, ds, d_qkv + at, 3 * D);  // dq = k·dS
        }
      }
    }
  };
};

}  // namespace kiln
