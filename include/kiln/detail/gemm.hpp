// kiln/detail/gemm.hpp — C (+)= op(A)·op(B) on column-major buffers, with
// packing space owned by the caller, so that a training step allocates nothing.
//
// Eigen's public product API allocates its packing buffers on the heap for
// large operands, once per product. kiln calls the same kernel (Eigen's GEBP)
// through Eigen's level-3 entry point and hands it buffers from the program's
// workspace, sized once when the program is built.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>

#include <Eigen/Core>

#include <kiln/bf16.hpp>

#include <kiln/detail/bf16_arrays.hpp>
#include <kiln/detail/gemm_small.hpp>
#include <kiln/detail/sgemm_avx2.hpp>
#include <kiln/detail/sgemm_avx512.hpp>
#include <kiln/detail/sgemm_avx512_bf16.hpp>
#include <kiln/detail/sgemm_avx512_bf16_values.hpp>

static_assert(
    EIGEN_WORLD_VERSION == 3 && EIGEN_MAJOR_VERSION >= 4,
    "kiln needs Eigen 3.4 (its level-3 product entry point, with the result's inner stride, is used directly)");

namespace kiln::detail {

using index = Eigen::Index;

/// The kernel run() uses for f32 on this target (both namespaces have
/// packed_a_floats, packed_b_floats and gemm); Eigen's where neither is compiled.
#if defined(__AVX512F__) && defined(__FMA__)  // (without FMA: sgemm_avx512.hpp's #error)
#define KILN_DETAIL_OWN_SGEMM 1
namespace own = avx512;
#elif defined(__AVX2__) && defined(__FMA__)
#define KILN_DETAIL_OWN_SGEMM 1
namespace own = avx2;
#else
#define KILN_DETAIL_OWN_SGEMM 0
#endif

/// Eigen's blocking descriptor, with packing buffers that kiln owns.
template <class T>
struct borrowed_blocking : Eigen::internal::level3_blocking<T, T> {
  borrowed_blocking(T* a, T* b, index m, index n, index k) {
    this->m_blockA = a;
    this->m_blockB = b;
    this->m_mc = m;
    this->m_nc = n;
    this->m_kc = k;
  }
};

/// Packing space for every GEMM a program runs. `reserve` each shape once
/// (when the program is built); `run` never allocates.
template <class T>
class gemm_scratch {
 public:
  /// Round both operands of every product to bf16 (accumulating in f32):
  /// precision<bf16>. Set it before reserving.
  void use_bf16_operands(bool on) noexcept {
    assert((!on || (need_a_ == 0 && need_b_ == 0)) && "kiln: use_bf16_operands(true) before reserve()");
    bf16_ = on;
  }
  bool bf16_operands() const noexcept { return bf16_; }

  void reserve(index m, index n, index k) {
    if (m == 0 || n == 0 || k == 0) return;  // run() packs nothing
    if (std::is_same_v<T, float> && bf16_ && !native_bf16 && !packs_bf16_values) {
      // the portable path rounds op(A) and op(B) into copies first
      need_rounded_ = std::max(need_rounded_, rounded_floats(m, n, k));
      if (need_rounded_ > cap_rounded_) rounded_ = allocate(need_rounded_, cap_rounded_);
    }
    auto [kc, mc, nc] = blocking(m, n, k);
    need_a_ = std::max(need_a_, static_cast<std::size_t>(kc * mc));
    need_b_ = std::max(need_b_, static_cast<std::size_t>(kc * nc));
#if KILN_DETAIL_OWN_SGEMM
    if (bf16_ && rounds_into_copies(m, n, k)) {
      need_rounded_ = std::max(need_rounded_, rounded_floats(m, n, k));
      if (need_rounded_ > cap_rounded_) rounded_ = allocate(need_rounded_, cap_rounded_);
    }
    if constexpr (own_kernel) {
      need_a_ = std::max(need_a_, static_cast<std::size_t>(own::packed_a_floats(m, k)));
      need_b_ = std::max(need_b_, static_cast<std::size_t>(own::packed_b_floats(n, k)));
      need_a_ = std::max(need_a_, static_cast<std::size_t>(small_gemm::scratch_floats<own::small_ops>(m, n, k)));
    }
#endif
    if (need_a_ > cap_a_) a_ = allocate(need_a_, cap_a_);
    if (need_b_ > cap_b_) b_ = allocate(need_b_, cap_b_);
  }

  /// True when bf16 operands go through AVX512-BF16 dot products (the target
  /// has them); otherwise they are rounded to bf16 and multiplied in f32.
  static constexpr bool native_bf16 = native_bf16_products && std::is_same_v<T, float>;

  /// True when, without AVX512-BF16, bf16 operands are widened (and f32
  /// ones rounded) while kiln's AVX-512 or AVX2 kernel packs them
  /// (detail/sgemm_avx512_bf16_values.hpp, detail/sgemm_avx2.hpp) rather
  /// than rounded into copies — except in a product that skips packing
  /// (rounds_into_copies: one small operand, shallow, narrow, or one in L2;
  /// detail/gemm_small.hpp), whose operands the small route takes rounded
  /// into copies, or as it copies one (small_gemm::gemm_converted).
  static constexpr bool packs_bf16_values =
#if defined(__AVX512F__) && defined(__AVX512BW__) && !defined(__AVX512BF16__)
      std::is_same_v<T, float>;
#elif !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
      std::is_same_v<T, float>;  // (kiln's AVX2 kernel packs the same way)
#else
      false;
#endif

  /// True when run() uses one of kiln's kernels (f32 on an AVX-512 target,
  /// or an AVX2 + FMA one) rather than Eigen's. Both sum in the same order
  /// (detail/gemm_blocking.hpp): the same bits on either kind of CPU.
  static constexpr bool own_kernel =
#if KILN_DETAIL_OWN_SGEMM
      std::is_same_v<T, float>;
#else
      false;
#endif

  /// C(m×n, leading dimension ldc) = beta·C + op(A)·op(B), all column-major,
  /// where op(A) is m×k and op(B) is k×n; beta is 0 (overwrite) or 1.
  /// Either operand may be given in kiln::bf16 (a bf16 program's activations
  /// and its step's copy of the weights), once use_bf16_operands(true) was
  /// set before reserving: it is then taken as it is.
  /// An f32 operand may also be given as f32_of_bf16_values (its values
  /// rounded to bf16 by the caller): where run() would round it into a
  /// copy, it is multiplied where it is; the same bits.
  template <bool TransA, bool TransB, class SA, class SB>
  void run(index m, index n, index k, const SA* a, index lda, const SB* b, index ldb, T* c, index ldc,
           bool accumulate) {
    constexpr bool bf16_source = std::is_same_v<SA, bf16> || std::is_same_v<SB, bf16>;
    static_assert(operand_type<SA> && operand_type<SB>,
                  "kiln::detail::gemm_scratch::run: an operand is the scratch's scalar, kiln::bf16 or (f32) "
                  "f32_of_bf16_values");
    // (an f32_of_bf16_values operand is the floats it holds, except where they would be rounded into a copy)
    const auto* pa = plain_operand(a);
    const auto* pb = plain_operand(b);
    static_assert(!bf16_source || std::is_same_v<T, float>, "kiln: bf16 operands accumulate in f32");
    assert((bf16_ || !bf16_source) && "kiln: bf16 operands need use_bf16_operands(true) before reserve()");
    if (m == 0 || n == 0) return;
    if (!accumulate && (k == 0 || !own_kernel)) {
      // (kiln's kernel overwrites C itself, without reading it)
      for (index j = 0; j < n; ++j) std::memset(c + j * ldc, 0, sizeof(T) * static_cast<std::size_t>(m));
    }
    if (k == 0) return;
    if constexpr (std::is_same_v<T, float>) {
      if (bf16_source || bf16_) {
#if KILN_DETAIL_OWN_SGEMM
        if constexpr (packs_bf16_values) {
          // A product that skips packing (one small operand, shallow,
          // narrow, or one in L2: rounds_into_copies) reads f32 only: the
          // small route takes its operands rounded (a bf16 one widened) to
          // bf16 values, into copies in their layouts, or as it copies one
          // column-major, and multiplies them in f32, the sums the packing
          // kernels make (small_gemm::gemm_converted). An operand given as
          // f32_of_bf16_values is read where it is. (Only where reserve()
          // made room for the copies; otherwise, defensively, the packing
          // kernel: the same bits.)
          const small_gemm::route how = small_gemm::choose<own::small_ops>(m, n, k);
          if (how != small_gemm::route::blocked && rounded_floats(m, n, k) <= cap_rounded_) {
            assert(static_cast<std::size_t>(small_gemm::route_scratch_floats<own::small_ops>(how, m, n, k)) <= cap_a_ &&
                   "kiln: gemm shape was not reserved");
            small_gemm::gemm_converted<own::small_ops, TransA, TransB>(how, m, n, k, pa, lda, pb, ldb, c, ldc, a_.get(),
                                                                       rounded_.get(), !accumulate, converter<SA>{},
                                                                       converter<SB>{});
            return;
          }
        }
#endif
#if defined(__AVX512BF16__)
        avx512::gemm_bf16<TransA, TransB>(m, n, k, pa, lda, pb, ldb, c, ldc, a_.get(), b_.get(), !accumulate);
#elif defined(__AVX512F__) && defined(__AVX512BW__)
        assert(static_cast<std::size_t>(avx512::packed_a_floats(m, k)) <= cap_a_ &&
               static_cast<std::size_t>(avx512::packed_b_floats(n, k)) <= cap_b_ && "kiln: gemm shape was not reserved");
        avx512::gemm_bf16_values<TransA, TransB>(m, n, k, pa, lda, pb, ldb, c, ldc, a_.get(), b_.get(), !accumulate);
#elif !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
        assert(static_cast<std::size_t>(avx2::packed_a_floats(m, k)) <= cap_a_ &&
               static_cast<std::size_t>(avx2::packed_b_floats(n, k)) <= cap_b_ && "kiln: gemm shape was not reserved");
        avx2::gemm_bf16_values<TransA, TransB>(m, n, k, pa, lda, pb, ldb, c, ldc, a_.get(), b_.get(), !accumulate);
#else
        // Portable (Eigen's kernel): op(A) and op(B) rounded to bf16 (a
        // bf16 operand widened) into dense copies in their layouts, in long
        // runs, then the f32 product (exact products, f32 sums). An operand
        // given as f32_of_bf16_values is read where it is.
        assert(rounded_floats(m, n, k) <= cap_rounded_ && "kiln: gemm shape was not reserved");
        const auto [ra, la] = small_gemm::in_layout<TransA>(m, k, pa, lda, rounded_.get(), 0, converter<SA>{});
        const auto [rb, lb] = small_gemm::in_layout<TransB>(k, n, pb, ldb, rounded_.get(), m * k, converter<SB>{});
        f32_run<TransA, TransB>(m, n, k, ra, la, rb, lb, c, ldc, !accumulate);
#endif
        return;
      }
    }
    if constexpr (!bf16_source) f32_run<TransA, TransB>(m, n, k, pa, lda, pb, ldb, c, ldc, !accumulate);
  }

  /// C += op(A)·op(B) in f32 (or f64): kiln's kernel where it has one (AVX-512, else AVX2), else
  /// Eigen's. With `overwrite` kiln's kernel sets C instead (Eigen's
  /// caller has zeroed it).
  template <bool TransA, bool TransB>
  void f32_run(index m, index n, index k, const T* a, index lda, const T* b, index ldb, T* c, index ldc,
               bool overwrite = false) {
#if KILN_DETAIL_OWN_SGEMM
    if constexpr (own_kernel) {
      // (one small operand, shallow, narrow, or one in L2: products without packing, detail/gemm_small.hpp; the same sums)
      assert(static_cast<std::size_t>(small_gemm::scratch_floats<own::small_ops>(m, n, k)) <= cap_a_ &&
             "kiln: gemm shape was not reserved");
      if (small_gemm::gemm_if_small<own::small_ops, TransA, TransB>(m, n, k, a, lda, b, ldb, c, ldc, a_.get(),
                                                                     overwrite))
        return;
      assert(static_cast<std::size_t>(own::packed_a_floats(m, k)) <= cap_a_ &&
             static_cast<std::size_t>(own::packed_b_floats(n, k)) <= cap_b_ && "kiln: gemm shape was not reserved");
      own::gemm<TransA, TransB>(m, n, k, a, lda, b, ldb, c, ldc, a_.get(), b_.get(), overwrite);
      return;
    }
#endif
    (void)overwrite;
    eigen_run<TransA, TransB>(m, n, k, a, lda, b, ldb, c, ldc);
  }

  /// The same product through Eigen's kernel whatever the target (C += op(A)·op(B)).
  template <bool TransA, bool TransB>
  void eigen_run(index m, index n, index k, const T* a, index lda, const T* b, index ldb, T* c, index ldc) {
    if (m == 0 || n == 0 || k == 0) return;
    auto [kc, mc, nc] = blocking(m, n, k);
    assert(static_cast<std::size_t>(kc * mc) <= cap_a_ && static_cast<std::size_t>(kc * nc) <= cap_b_ &&
           "kiln: gemm shape was not reserved");
    borrowed_blocking<T> bl(a_.get(), b_.get(), mc, nc, kc);
    constexpr int lhs_order = TransA ? Eigen::RowMajor : Eigen::ColMajor;
    constexpr int rhs_order = TransB ? Eigen::RowMajor : Eigen::ColMajor;
    Eigen::internal::general_matrix_matrix_product<index, T, lhs_order, false, T, rhs_order, false, Eigen::ColMajor,
                                                   1>::run(m, n, k, a, lda, b, ldb, c, 1, ldc, T(1), bl);
  }

  /// True for a bf16 product (m × n, k deep) that run() multiplies by a
  /// small route from rounded copies of its operands (or rounding one as
  /// the route copies it: small_gemm::gemm_converted): it skips packing on
  /// this CPU (small_gemm::choose), and the target packs bf16 values
  /// otherwise (no AVX512-BF16). reserve() sizes the copies for it; an
  /// operand given as f32_of_bf16_values is read where it is instead of
  /// copied.
  static bool rounds_into_copies(index m, index n, index k) noexcept {
#if KILN_DETAIL_OWN_SGEMM
    return packs_bf16_values && small_gemm::choose<own::small_ops>(m, n, k) != small_gemm::route::blocked;
#else
    (void)m, (void)n, (void)k;
    return false;
#endif
  }
  /// The same from the shape alone, at compile time (a layer sizing its
  /// workspace: conv2d): true where a product of this shape rounds into
  /// copies. (A product whose op(A), or op(B)ᵀ, fits in half the L2 may
  /// skip packing too, by a rule that depends on the CPU, so one this says
  /// false for may still copy.)
  static constexpr bool rounds_into_copies_by_shape(index m, index n, index k) noexcept {
#if KILN_DETAIL_OWN_SGEMM
    return packs_bf16_values && small_gemm::choose_by_shape<own::small_ops>(m, n, k) != small_gemm::route::blocked;
#else
    (void)m, (void)n, (void)k;
    return false;
#endif
  }

 private:
  /// Floats of the copies of a product's operands that run() rounds (or
  /// widens) first for a small route (small_gemm::gemm_converted).
  static std::size_t rounded_floats(index m, index n, index k) noexcept {
    return static_cast<std::size_t>((m + n) * k);
  }

  template <class S>
  static constexpr bool operand_type = std::is_same_v<S, T> || std::is_same_v<S, bf16> ||
                                       (std::is_same_v<S, f32_of_bf16_values> && std::is_same_v<T, float>);

  /// An operand's values as bf16 values in f32: rounded (an f32 one) or
  /// widened (a bf16 one); one value, or a run of them (src, count, dst).
  struct to_bf16_values {
    float operator()(float v) const noexcept { return round_to_bf16(v); }
    float operator()(bf16 v) const noexcept { return static_cast<float>(v); }
    void operator()(const float* src, index count, float* dst) const noexcept {
      round_values(src, static_cast<std::size_t>(count), dst);
    }
    void operator()(const bf16* src, index count, float* dst) const noexcept {
      widen(src, static_cast<std::size_t>(count), dst);
    }
  };
  /// How a small route (or the portable path) takes an operand given as S:
  /// as it is when its caller rounded it (f32_of_bf16_values), else
  /// to_bf16_values.
  template <class S>
  using converter = std::conditional_t<std::is_same_v<S, f32_of_bf16_values>, small_gemm::as_is, to_bf16_values>;

  struct free_aligned {
    void operator()(T* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
  };
  using buffer = std::unique_ptr<T[], free_aligned>;

  struct sizes {
    index kc, mc, nc;
  };
  static sizes blocking(index m, index n, index k) {
    index kc = k, mc = m, nc = n;
    Eigen::internal::computeProductBlockingSizes<T, T, 1>(kc, mc, nc, index{1});
    return {kc, mc, nc};
  }
  static buffer allocate(std::size_t n, std::size_t& cap) {
    cap = n;
    return buffer(static_cast<T*>(::operator new[](n * sizeof(T), std::align_val_t{64})));
  }

  buffer a_, b_, rounded_;
  std::size_t need_a_ = 0, need_b_ = 0, cap_a_ = 0, cap_b_ = 0, need_rounded_ = 0, cap_rounded_ = 0;
  bool bf16_ = false;
};

}  // namespace kiln::detail
