// kiln/detail/vector_math.hpp — exp, tanh, sigmoid, erf and GELU (and the largest value) over f32
// arrays, 16 (AVX-512), 8 (AVX2 + FMA) or 4 (SSE2 without AVX2 + FMA)
// values at a time, or one at a time.
//
// WHAT IT IS
//   Each function is one sequence of operations on a "pack" (avx512_pack,
//   avx2_pack, sse2_pack, sse2_fma_pack, scalar_pack:
//   detail/vector_packs.hpp): the same polynomial, the same clamps, and every
//   multiply-add an explicit fused one (std::fma in the scalar pack; in the
//   SSE2 one the instruction with FMA, else exact in double), so an
//   element's result has the same bits whichever pack computes it — on
//   every x86-64 CPU that kiln is compiled for, and in the tail of
//   an array (masked loads, not a scalar loop). No product feeds an addition
//   except through fma: the compiler has nothing left to contract.
//   `native_pack` is the widest the target has (in a build for the x86-64
//   baseline, each function runs through with_pack: the SSE2 pack with the
//   FMA instruction where the CPU has it); f64 overloads call std:: per
//   element (double keeps libm's accuracy).
// ACCURACY (f32, against double std:: over every 257th float of a range;
//   tests/detail/vector_math_test.cpp asserts the bounds, docs/performance.md)
//   exp ≤ 1.1 ulp; tanh ≤ 1.5; sigmoid, erf ≤ 2.5; gelu ≤ 8 ulp for x ≥ −2,
//   ≤ 64 ulp down to −5.657 (x²·2⁻²⁴ relative from rounding x/√2), then −0
//   (erf's clamp at |x/√2| = 4, where PyTorch's f32 1 + erf is 0 too);
//   gelu′ within 3e-7 absolute, from x alone or given y = gelu(x) (Φ = y/x,
//   what an f32 gelu layer's backward uses).
// NaN in gives NaN out; ±inf give the functions' limits.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numbers>

#include <kiln/detail/avx512.hpp>
#include <kiln/detail/bf16_value_table.hpp>
#include <kiln/detail/vector_packs.hpp>

KILN_AVX512_BEGIN

namespace kiln::detail::vmath {

/// The element functions, on one pack.
namespace kernel {

/// Horner's rule with fused multiply-adds, highest coefficient first.
template <class P, std::size_t N>
typename P::v horner(typename P::v x, const float (&c)[N]) {
  typename P::v r = P::set(c[0]);
  for (std::size_t i = 1; i < N; ++i) r = P::fma(r, x, P::set(c[i]));
  return r;
}

/// e^x as a product m·s (both finite for finite x; s a power of two), so a
/// caller can fuse it into what follows. x = n·ln2 + r, |r| ≤ ln2/2;
/// e^r by Cephes' degree-7 polynomial; 2^n in two halves so that results
/// down to the subnormals are rounded once. x clamped to [−104, 88.8].
template <class P>
void exp_split(typename P::v x, typename P::v& m, typename P::v& s) {
  using V = typename P::v;
  static constexpr float c[] = {0x1.a0d2cep-13f, 0x1.6e879cp-10f, 0x1.111210p-7f,
                                0x1.555382p-5f,  0x1.555554p-3f,  0x1.000000p-1f};
  x = P::min(P::set(88.8f), P::max(P::set(-104.0f), x));  // (NaN stays NaN)
  const V shifter = P::set(0x1.8p23f);                       // adding it rounds to an integer
  const V t = P::fma(x, P::set(0x1.715476p+0f), shifter);  // x·log2(e) + shifter
  const V n = P::sub(t, shifter);
  V r = P::fma(n, P::set(-0x1.62e430p-1f), x);
  r = P::fma(n, P::set(0x1.05c610p-29f), r);
  V y = P::fma(horner<P>(r, c), P::mul(r, r), r);
  y = P::add(y, P::set(1.0f));
  V s1;
  P::exp2_pair(t, shifter, s1, s);
  m = P::mul(y, s1);
}

template <class P>
typename P::v exp(typename P::v x) {
  typename P::v m, s;
  exp_split<P>(x, m, s);
  return P::mul(m, s);
}

/// tanh: x + x³·p(x²) (Cephes) below |x| = 0.625, else ±(1 − 2/(e^{2|x|} + 1)).
template <class P>
typename P::v tanh(typename P::v x) {
  using V = typename P::v;
  static constexpr float c[] = {-0x1.75e1d4p-8f, 0x1.52269cp-6f, -0x1.b83c5ap-5f, 0x1.110726p-3f, -0x1.555532p-2f};
  const V a = P::abs(x), z = P::mul(x, x);
  const V small = P::fma(P::mul(horner<P>(z, c), z), a, a);
  V m, s;
  exp_split<P>(P::add(a, a), m, s);
  const V large = P::sub(P::set(1.0f), P::div(P::set(2.0f), P::fma(m, s, P::set(1.0f))));
  return P::xor_sign(P::select(P::less(a, P::set(0.625f)), small, large), x);  // (tanh(−0) = −0)
}

/// 1 / (1 + e^−x).
template <class P>
typename P::v sigmoid(typename P::v x) {
  typename P::v m, s;
  exp_split<P>(P::xor_sign(x, P::set(-1.0f)), m, s);
  return P::div(P::set(1.0f), P::fma(m, s, P::set(1.0f)));
}

/// erf(t) = t·p(t²) for |t| < 0.921875; above, erf(|t|) = 1 − e^{q(|t|)}
/// (q fitted to log erfc), |t| clamped to 4 where erf is 1 in f32. Returns
/// the small form's polynomial `p` and the large form's e^q as m·s.
template <class P>
void erf_parts(typename P::v t, typename P::v& p, typename P::v& m, typename P::v& s) {
  static constexpr float cs[] = {0x1.5f14c6p-14f, -0x1.aaeabep-11f, 0x1.54db02p-8f, -0x1.b81080p-6f,
                                 0x1.ce2e20p-4f,  -0x1.812744p-2f,  0x1.20dd76p+0f};
  static constexpr float cl[] = {-0x1.d5c274p-26f, 0x1.29ec90p-19f, -0x1.af3a7ap-15f, 0x1.476920p-11f,
                                 -0x1.3dbc56p-8f,  0x1.b3db8cp-6f,  -0x1.c3db0ep-4f,  -0x1.436624p-1f,
                                 -0x1.215c54p+0f,  0x1.5f17c2p-12f};
  p = horner<P>(P::mul(t, t), cs);
  exp_split<P>(horner<P>(P::min(P::set(4.0f), P::abs(t)), cl), m, s);
}
template <class P>
typename P::v erf(typename P::v t) {
  using V = typename P::v;
  V p, m, s;
  erf_parts<P>(t, p, m, s);
  const V large = P::xor_sign(P::fma(P::xor_sign(m, P::set(-1.0f)), s, P::set(1.0f)), t);
  return P::select(P::less(P::abs(t), P::set(0.921875f)), P::mul(t, p), large);
}

/// Φ(x) = ½(1 + erf(x/√2)), without the cancellation of 1 + erf for x < 0:
/// there it is ½e^q, the small tail itself.
template <class P>
typename P::v phi(typename P::v x) {
  using V = typename P::v;
  const V t = P::mul(x, P::set(0x1.6a09e6p-1f));  // x·(1/√2), as PyTorch rounds it
  V p, m, s;
  erf_parts<P>(t, p, m, s);
  const V small = P::fma(P::mul(t, P::set(0.5f)), p, P::set(0.5f));
  const V upper = P::fma(P::mul(m, P::set(-0.5f)), s, P::set(1.0f));
  // below erf's clamp (x < −5.657) Φ is 0, as 1 + erf is in f32
  const V lower = P::select(P::less(t, P::set(-4.0f)), P::set(0.0f), P::mul(P::mul(m, P::set(0.5f)), s));
  return P::select(P::less(P::abs(t), P::set(0.921875f)), small, P::select(P::less(t, P::set(0.0f)), lower, upper));
}

template <class P>
typename P::v gelu(typename P::v x) {
  return P::mul(x, phi<P>(x));
}
/// d gelu/dx = Φ(x) + x·φ(x), φ(x) = e^{−x²/2}/√(2π), given Φ(x) as `cdf`.
template <class P>
typename P::v gelu_derivative_from_cdf(typename P::v x, typename P::v cdf) {
  typename P::v m, s;
  exp_split<P>(P::mul(P::mul(x, x), P::set(-0.5f)), m, s);
  return P::fma(P::mul(P::mul(x, P::set(0x1.988454p-2f)), m), s, cdf);
}
/// d gelu/dx, Φ(x) computed from x.
template <class P>
typename P::v gelu_derivative(typename P::v x) {
  return gelu_derivative_from_cdf<P>(x, phi<P>(x));
}
/// The same, given y = gelu(x) as the forward pass computed it: Φ(x) is
/// y / x (one division instead of Φ's two polynomials and exponential),
/// except where |x| is not strictly between 2⁻¹⁰⁰ and 2¹⁰⁰ (0, ±∞, NaN),
/// which take Φ(x) itself. Lane by lane, so a value does not depend on its
/// neighbours.
template <class P>
typename P::v gelu_derivative_given_output(typename P::v x, typename P::v y) {
  const typename P::v a = P::abs(x);
  const auto quotient = P::both(P::less(P::set(0x1p-100f), a), P::less(a, P::set(0x1p100f)));
  typename P::v cdf = P::div(y, x);
  if (!P::all(quotient)) cdf = P::select(quotient, cdf, phi<P>(x));
  return gelu_derivative_from_cdf<P>(x, cdf);
}

}  // namespace kernel

/// y[i] = f(x[i]) for i < n, a pack at a time (the tail by masked loads).
template <class P, class F>
void map(const float* x, float* y, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; i += P::width) P::store(y + i, f(P::load(x + i, n - i)), n - i);
}
/// y[i] = f(a[i], b[i]).
template <class P, class F>
void map(const float* a, const float* b, float* y, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; i += P::width) P::store(y + i, f(P::load(a + i, n - i), P::load(b + i, n - i)), n - i);
}
/// y[i] = f(a[i], b[i], c[i]).
template <class P, class F>
void map(const float* a, const float* b, const float* c, float* y, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; i += P::width)
    P::store(y + i, f(P::load(a + i, n - i), P::load(b + i, n - i), P::load(c + i, n - i)), n - i);
}

// ---- arrays: f32 through the packs, f64 through std:: ----------------------

/// The largest of x[i] for i < n, as the running `m = std::max(m, x[i])`
/// from m = −∞ finds it (a NaN passed over), a pack at a time: a maximum
/// is exact, so the packs change no value (of ±0, either may be returned).
template <class P = native_pack>
float max_of(const float* x, std::size_t n) {
  constexpr float lowest = -std::numeric_limits<float>::infinity();
  typename P::v acc = P::set(lowest);
  std::size_t i = 0;
  for (; i + P::width <= n; i += P::width) acc = P::max(P::load(x + i, P::width), acc);  // (a NaN x keeps acc)
  alignas(64) float lanes[P::width];
  P::store(lanes, acc, P::width);
  float m = lowest;
  for (float v : lanes) m = m < v ? v : m;
  for (; i < n; ++i) m = m < x[i] ? x[i] : m;
  return m;
}

/// y = e^(a·x + b) (a·x + b fused); returns Σ y in index order (the same
/// order on every CPU). y may be null: the values are then only summed.
template <class P = native_pack>
float exp_affine_sum(const float* x, float a, float b, std::size_t n, float* y) {
  float sum = 0;
  with_pack<P>([&]<class Q>(Q) {
    const auto f = [&](typename Q::v v) { return kernel::exp<Q>(Q::fma(v, Q::set(a), Q::set(b))); };
    if (y) {
      map<Q>(x, y, n, f);
      for (std::size_t i = 0; i < n; ++i) sum += y[i];
      return;
    }
    alignas(64) float block[64];
    for (std::size_t i = 0; i < n; i += 64) {
      const std::size_t k = n - i < 64 ? n - i : 64;
      map<Q>(x + i, block, k, f);
      for (std::size_t j = 0; j < k; ++j) sum += block[j];
    }
  });
  return sum;
}
inline double exp_affine_sum(const double* x, double a, double b, std::size_t n, double* y) {
  double sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = std::exp(x[i] * a + b);
    if (y) y[i] = e;
    sum += e;
  }
  return sum;
}

template <class P = native_pack>
void exp(const float* x, float* y, std::size_t n) {
  with_pack<P>([&]<class Q>(Q) { map<Q>(x, y, n, [](typename Q::v v) { return kernel::exp<Q>(v); }); });
}
template <class P = native_pack>
void tanh(const float* x, float* y, std::size_t n) {
  with_pack<P>([&]<class Q>(Q) { map<Q>(x, y, n, [](typename Q::v v) { return kernel::tanh<Q>(v); }); });
}
inline void tanh(const double* x, double* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}
template <class P = native_pack>
void sigmoid(const float* x, float* y, std::size_t n) {
  with_pack<P>([&]<class Q>(Q) { map<Q>(x, y, n, [](typename Q::v v) { return kernel::sigmoid<Q>(v); }); });
}
inline void sigmoid(const double* x, double* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = 1 / (1 + std::exp(-x[i]));
}
template <class P = native_pack>
void erf(const float* x, float* y, std::size_t n) {
  with_pack<P>([&]<class Q>(Q) { map<Q>(x, y, n, [](typename Q::v v) { return kernel::erf<Q>(v); }); });
}
template <class P = native_pack>
void gelu(const float* x, float* y, std::size_t n) {
  with_pack<P>([&]<class Q>(Q) { map<Q>(x, y, n, [](typename Q::v v) { return kernel::gelu<Q>(v); }); });
}
/// PyTorch's formula, with libm's erf.
inline void gelu(const double* x, double* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * (0.5 * (1 + std::erf(x[i] * (std::numbers::sqrt2 / 2))));
}
/// dx = dy · gelu′(x).
template <class P = native_pack>
void gelu_backward(const float* x, const float* dy, float* dx, std::size_t n) {
  with_pack<P>([&]<class Q>(Q) {
    map<Q>(x, dy, dx, n, [](typename Q::v v, typename Q::v d) { return Q::mul(d, kernel::gelu_derivative<Q>(v)); });
  });
}
/// dx = dy · gelu′(x), given y = gelu(x) as vmath::gelu computed it (the
/// layer's stored output): Φ(x) = y / x (kernel::gelu_derivative_given_output).
template <class P = native_pack>
void gelu_backward(const float* x, const float* y, const float* dy, float* dx, std::size_t n) {
  with_pack<P>([&]<class Q>(Q) {
    map<Q>(x, y, dy, dx, n, [](typename Q::v v, typename Q::v out, typename Q::v d) {
      return Q::mul(d, kernel::gelu_derivative_given_output<Q>(v, out));
    });
  });
}

/// gelu and gelu′ (kernel::gelu, kernel::gelu_derivative) for the bf16
/// values, built on first use (detail/bf16_value_table.hpp).
inline const bf16_value_table& gelu_table() {
  static const bf16_value_table t([](native_pack::v v) { return kernel::gelu<native_pack>(v); });
  return t;
}
inline const bf16_value_table& gelu_derivative_table() {
  static const bf16_value_table t([](native_pack::v v) { return kernel::gelu_derivative<native_pack>(v); });
  return t;
}
/// vmath::gelu and the two-array gelu_backward, the same bits, for inputs
/// that are mostly bf16 values (a bf16 program's widened activations):
/// those are looked up, any other input is computed.
template <class P = native_pack>
void gelu_of_bf16_values(const float* x, float* y, std::size_t n) {
  const bf16_value_table& t = gelu_table();
  with_pack<P>([&]<class Q>(Q) {
    map<Q>(x, y, n, [&t](typename Q::v v) {
      return t.lookup<Q>(v, [](typename Q::v u) { return kernel::gelu<Q>(u); });
    });
  });
}
template <class P = native_pack>
void gelu_backward_of_bf16_values(const float* x, const float* dy, float* dx, std::size_t n) {
  const bf16_value_table& t = gelu_derivative_table();
  with_pack<P>([&]<class Q>(Q) {
    map<Q>(x, dy, dx, n, [&t](typename Q::v v, typename Q::v d) {
      return Q::mul(d, t.lookup<Q>(v, [](typename Q::v u) { return kernel::gelu_derivative<Q>(u); }));
    });
  });
}
inline void gelu_backward(const double* x, const double* dy, double* dx, std::size_t n) {
  constexpr double inv_sqrt_2pi = 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    dx[i] = dy[i] * (0.5 * (1 + std::erf(v * (std::numbers::sqrt2 / 2))) + v * inv_sqrt_2pi * std::exp(-0.5 * (v * v)));
  }
}
/// dx = dy · (1 − y²), y = tanh(x) (1 − y² fused).
template <class P = native_pack>
void tanh_backward(const float* y, const float* dy, float* dx, std::size_t n) {
  with_pack<P>([&]<class Q>(Q) {
    map<Q>(y, dy, dx, n, [](typename Q::v v, typename Q::v d) {
      return Q::mul(d, Q::fma(Q::xor_sign(v, Q::set(-1.0f)), v, Q::set(1.0f)));
    });
  });
}
inline void tanh_backward(const double* y, const double* dy, double* dx, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dx[i] = dy[i] * (1 - y[i] * y[i]);
}

}  // namespace kiln::detail::vmath

KILN_AVX512_END
