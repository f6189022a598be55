// kiln/replicate.hpp — data-parallel replicas: the option, their shares of a
// step, and the fixed-order reduction of their gradients.
//
// WHAT IT IS
//   `compile<Model, batch<B>, replicate<N>>()` runs N replicas, each on a
//   core of its own (replica 0 on the calling thread, the others on pinned
//   threads: detail/worker_pool.hpp), every one with its own workspace
//   and gradient buffer, all reading the ONE parameter buffer (so ties
//   cannot break). A step takes N × B samples: replica r the r-th B.
//
//     samples_of(r, valid, B)   how many of replica r's B samples count when
//                               only the first `valid` of the step do
//     share_of(r, N, size)      replica r's share [begin, end) of a flat
//                               buffer, in whole 64-byte lines: each
//                               replica reduces and updates its own share
//     reduce_share(...)         the weighted sum of N gradient buffers over
//                               one share, always in replica order
//     combine_losses(...)       the step's loss from the replicas' losses
//
// DETERMINISM
//   Every sum runs over the replicas in the same order whatever the threads'
//   timing, so a seed gives the same bits for a given N.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include <kiln/detail/parameter_layout.hpp>

namespace kiln {

namespace diagnostics {
template <long long N>
inline constexpr bool replicate_needs_at_least_one_replica = N > 0;
template <long long N, long long... Cores>
inline constexpr bool replicate_names_no_core_or_one_per_replica =
    sizeof...(Cores) == 0 || static_cast<long long>(sizeof...(Cores)) == N;
template <long long... Cores>
inline constexpr bool replicate_core_numbers_must_be_at_least_0 = ((Cores >= 0) && ...);
}  // namespace diagnostics

/// Data-parallel training on N replicas, one thread each, pinned to cores
/// 0…N−1, or to the named Cores (`replicate<1, 5>`: one replica on core 5).
template <long long N, long long... Cores>
struct replicate {
  // Its checks: one error each, and the class stays whole (compile runs
  // them first, see detail::option_accepted in kiln/options.hpp).
  static constexpr bool accepted = [] {
    static_assert(diagnostics::replicate_needs_at_least_one_replica<N>,
                  "kiln::replicate<N>: N is the number of replicas and must be at least 1");
    static_assert(N <= 0 || diagnostics::replicate_names_no_core_or_one_per_replica<N, Cores...>,
                  "kiln::replicate<N, Cores...>: name no core (replica r runs on core r) or exactly one core per "
                  "replica");
    static_assert(diagnostics::replicate_core_numbers_must_be_at_least_0<Cores...>,
                  "kiln::replicate<N, Cores...>: a core number is at least 0");
    return diagnostics::replicate_needs_at_least_one_replica<N> &&
           diagnostics::replicate_names_no_core_or_one_per_replica<N, Cores...> &&
           diagnostics::replicate_core_numbers_must_be_at_least_0<Cores...>;
  }();
  /// N, or 1 as a stand-in when rejected (so that error comes alone).
  static constexpr std::size_t replicas = accepted ? static_cast<std::size_t>(N) : 1;
  static constexpr std::array<std::size_t, sizeof...(Cores)> cores{static_cast<std::size_t>(Cores)...};
  static constexpr bool threaded = true;
};

namespace detail {
/// No replicate option: one replica, run by the calling thread.
struct single_replica {
  static constexpr std::size_t replicas = 1;
  static constexpr std::array<std::size_t, 0> cores{};
  static constexpr bool threaded = false;
};

template <class T>
struct is_replicate : std::false_type {};
template <long long N, long long... C>
struct is_replicate<replicate<N, C...>> : std::true_type {};

/// Of a step whose first `valid` samples count, how many of replica r's B do.
constexpr std::size_t samples_of(std::size_t r, std::size_t valid, std::size_t b) noexcept {
  return valid > r * b ? std::min(b, valid - r * b) : 0;
}

/// Replica r's share [begin, end) of a flat buffer of `size` elements split
/// among `replicas`, in whole cache lines (16 floats).
constexpr std::pair<std::size_t, std::size_t> share_of(std::size_t r, std::size_t replicas, std::size_t size) noexcept {
  const std::size_t chunk = round_up((size + replicas - 1) / replicas, 16);
  const std::size_t begin = std::min(r * chunk, size);
  return {begin, std::min(begin + chunk, size)};
}

/// out[i] = Σ_q weight[q] · grad(q)[i] for i in [begin, end), q in replica
/// order (out is grad(0)); weight[q] is replica q's share of the valid samples.
/// Equal shares (every training step): the sum, then one scaling by 1/N, as
/// the rank reduction does it (detail/rank_reduction.hpp), so N replicas and
/// N ranks of one give the same bits even where a gradient is subnormal
/// (where halving each term first would round differently).
template <std::size_t N, class T, class Gradients>
void reduce_share(std::pair<std::size_t, std::size_t> share, std::size_t valid, std::size_t b,
                  Gradients&& grad) noexcept {
  // The buffers' addresses, read once: fetched through `grad` inside the
  // loop, each store to `out` could change them (for all the compiler
  // knows), which keeps the loop scalar and reloading them per element.
  T* const out = grad(0);
  const T* in[N];
  for (std::size_t q = 0; q < N; ++q) in[q] = grad(q);
  if (valid == N * b) {
    const T scale = T(1) / static_cast<T>(N);
    for (std::size_t i = share.first; i < share.second; ++i) {
      T sum = out[i];
      for (std::size_t q = 1; q < N; ++q) sum += in[q][i];
      out[i] = sum * scale;
    }
    return;
  }
  T weight[N];
  for (std::size_t q = 0; q < N; ++q)
    weight[q] = valid ? static_cast<T>(samples_of(q, valid, b)) / static_cast<T>(valid) : T(0);
  for (std::size_t i = share.first; i < share.second; ++i) {
    T sum = weight[0] * out[i];
    for (std::size_t q = 1; q < N; ++q) sum += weight[q] * in[q][i];
    out[i] = sum;
  }
}

/// The step's loss from the replicas' (each over its own valid samples):
/// their mean weighted by those samples, in replica order, over `valid`;
/// correct predictions and predictions summed. (Loss: kiln::loss_value.)
template <class Loss>
Loss combine_losses(std::span<const Loss> results, std::size_t valid) noexcept {
  Loss all{0, valid, 0, 0};
  double weighted = 0;
  for (const Loss& r : results) {
    weighted += r.loss * static_cast<double>(r.samples);
    all.correct += r.correct;
    all.predictions += r.predictions;
  }
  all.loss = valid ? weighted / static_cast<double>(valid) : 0.0;
  return all;
}
}  // namespace detail

}  // namespace kiln
