// kiln/detail/rank_reduction.hpp — the last stage of the gradient
// reduction: across MPI ranks, after each process has reduced its replicas.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <cstddef>
#include <span>

#include <kiln/distributed.hpp>
#include <kiln/losses/softmax_cross_entropy.hpp>

namespace kiln::detail {

/// Every rank ends with the same gradient (that of the mean loss over all
/// ranks' samples) and the same loss (so a NaN on any rank is every rank's):
/// `r` is this rank's result over its samples and `gradients` its gradient.
template <class T>
loss_value average_across_ranks(loss_value r, std::span<T> gradients) {
  const double mine = static_cast<double>(r.samples);
  double totals[4] = {r.loss * mine, mine, static_cast<double>(r.correct), static_cast<double>(r.predictions)};
  distributed::allreduce_sum(std::span<double>(totals));
  const double ranks = static_cast<double>(distributed::ranks());
  if (totals[1] == mine * ranks) {
    // Equal shares (every training step): sum, then one exact scaling.
    distributed::allreduce_sum(gradients);
    const T scale = T(1) / static_cast<T>(ranks);
    for (T& g : gradients) g *= scale;
  } else {
    // Unequal shares (a padded last batch): weight each rank by its samples.
    const T weight = totals[1] > 0 ? static_cast<T>(mine / totals[1]) : T(0);
    for (T& g : gradients) g *= weight;
    distributed::allreduce_sum(gradients);
  }
  r.samples = static_cast<std::size_t>(totals[1]);
  r.loss = r.samples ? totals[0] / totals[1] : 0.0;
  r.correct = static_cast<std::size_t>(totals[2]);
  r.predictions = static_cast<std::size_t>(totals[3]);
  return r;
}

}  // namespace kiln::detail
