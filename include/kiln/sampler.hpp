// kiln/sampler.hpp — the static sampler: equal shards, whole batches.
//
// WHAT IT DOES
//   Every epoch has ONE order of the samples, derived from (seed, epoch) — the
//   same in every worker and every process — or supplied by the user
//   (weighted, curriculum, ...). Step s of the epoch takes the next
//   `workers × batch` entries of that order; worker w (of all replicas of
//   all ranks: w = rank × replicas + replica) gets entries
//   [s·W·B + w·B, s·W·B + (w+1)·B). Shards are disjoint and equal, and
//   every batch has exactly B samples, so shapes never change. When the
//   order does not divide into whole steps, the rest is dropped
//   (remainder::drop) or the last step wraps around to the start
//   (remainder::wrap).
//
// USE ON ITS OWN
//   static_sampler s{.samples = n, .batch = 64, .workers = 4, .seed = 1};
//   auto order = s.order(epoch);                     // or your own order
//   for (std::size_t step = 0; step < s.steps(order.size()); ++step)
//     s.shard(order, step, worker, my_indices);      // B indices
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include <kiln/random.hpp>

namespace kiln {

/// What to do with the samples left over when an epoch does not divide into
/// whole steps: leave them out this epoch, or fill the last step from the
/// start of the order.
enum class remainder { drop, wrap };

struct static_sampler {
  std::size_t samples = 0;  ///< size of the dataset
  std::size_t batch = 1;    ///< samples per worker and step
  std::size_t workers = 1;  ///< replicas × ranks
  std::uint64_t seed = 0;
  bool shuffle = true;
  kiln::remainder remainder = remainder::drop;

  std::size_t step_size() const noexcept { return batch * workers; }

  /// Steps in an epoch over an order of `length` entries.
  std::size_t steps(std::size_t length) const noexcept {
    const std::size_t g = step_size();
    return remainder == remainder::drop ? length / g : (length + g - 1) / g;
  }
  std::size_t steps() const noexcept { return steps(samples); }

  /// The epoch's order: 0…samples−1, shuffled from (seed, epoch) if shuffling.
  std::vector<std::size_t> order(std::size_t epoch) const {
    std::vector<std::size_t> o(samples);
    std::iota(o.begin(), o.end(), std::size_t{0});
    if (shuffle) {
      rng g(seed, epoch);
      kiln::shuffle(std::span<std::size_t>(o), g);
    }
    return o;
  }

  /// Writes worker `worker`'s `batch` entries of `order` for `step` into `out`.
  void shard(std::span<const std::size_t> order, std::size_t step, std::size_t worker,
             std::span<std::size_t> out) const {
    if (worker >= workers || out.size() < batch || order.empty() || step >= steps(order.size())) {
      throw std::out_of_range(
          fmt::format("kiln::static_sampler::shard: step {} of {}, worker {} of {}, {} slots for "
                      "a batch of {}, order of {}",
                      step, steps(order.size()), worker, workers, out.size(), batch, order.size()));
    }
    const std::size_t first = step * step_size() + worker * batch;
    for (std::size_t i = 0; i < batch; ++i) out[i] = order[(first + i) % order.size()];
  }
};

}  // namespace kiln
