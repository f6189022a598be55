// kiln/step.hpp — one training step, in one place.
//
//   kiln::train_step(program, targets, optimizer, optimizer_state,
//                    {.max_grad_norm = 1.0});
//
// SHAPE CONTRACT: program.input() holds the step's global_batch samples
// (replicas × B); targets holds global_batch × targets_per_sample values of
// the loss's target_type (fewer is std::invalid_argument).
//
// runs forward and backward on every replica, reduces the gradients (over
// the replicas in a fixed order, then across MPI ranks), decides about a
// non-finite loss, clips the gradient to a global norm and applies the
// optimizer. kiln::trainer calls it for every step; so does a user's own
// loop. Nothing else in kiln reduces, clips or updates.
//
// A NON-FINITE LOSS
//   When the loss of the step (over all replicas and ranks) is NaN or
//   infinite, the step changes nothing: the parameters, the optimizer's
//   state and the model's state (batch_norm's running statistics, which the
//   forward pass had already updated) and the step count are as they were
//   before it. The loss is returned; the caller decides (kiln::trainer
//   stops with an error).
//
// THE STEP COUNT
//   The program's store counts the steps applied (parameter_store::step):
//   a step's dropout masks and Adam's bias correction (t = count + 1) both
//   follow it, and a checkpoint restores it, so there is one count.
//
// A FAULT ON ONE RANK
//   Under MPI, an exception in any rank's forward or backward (a token id
//   out of range, ...) ends the step on every rank with the same
//   kiln::distributed::rank_failure, before the gradient's allreduce, so no
//   rank hangs waiting for another; the step changed nothing on any rank.
//   (An exception in a replica thread is rethrown in the calling thread
//   first: kiln/program.hpp.)
//
// COST
//   No allocation. Without clipping and MPI nothing needs the whole
//   gradient before the update: with one replica, each layer's parameters
//   are updated right after the backward of the first layer that uses them,
//   while their gradient is still in cache (a non-finite loss is caught
//   before backward starts); with replicate<N>, the reduction and the
//   update run in one parallel pass (each replica reduces and updates its
//   share of the flat buffer). With clipping or MPI the reduction comes
//   first, then the update. Either way the update is element-wise, so the
//   bits are the same.
//
//   An exception thrown by a layer's backward (none of kiln's layers throws
//   there: an embedding checks its token ids in forward) leaves the layers
//   after it in the model updated by a one-replica step without clipping.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <utility>

#include <kiln/distributed.hpp>
#include <kiln/losses/softmax_cross_entropy.hpp>
#include <kiln/program.hpp>

namespace kiln {

/// How a step treats the gradient before the update.
struct step_options {
  /// Scale the gradient down to this global L2 norm when it is larger (0: never).
  double max_grad_norm = 0;
};

namespace detail {

struct stepper {
  template <class P, class O, class State>
  static loss_value train(P& p, std::span<const typename P::target_type> targets, const O& optimizer,
                          State& state, const step_options& options) {
    using T = typename P::scalar_type;
    p.check_targets(targets, P::global_batch);
    const bool was_training = std::exchange(p.training_, true);
    struct after_step {
      P& p;
      bool mode;
      ~after_step() { p.training_ = mode; }
    } after{p, was_training};

    // The forward pass updates the running statistics; keep them until the
    // loss is known to be finite.
    constexpr std::size_t state_size = P::state_layout::buffer_size;
    if constexpr (state_size > 0) std::copy_n(p.state().data(), state_size, p.kept_state_.get());
    auto skip = [&](const loss_value& r) {
      if constexpr (state_size > 0) std::copy_n(p.kept_state_.get(), state_size, p.state().data());
      return r;
    };

    // This step's number, 1-based: the store counts the steps applied, so
    // Adam's bias correction (and a resumed run) sees the one step count.
    const std::uint64_t number = p.step() + 1;
    if constexpr (P::replicas == 1) {
      if (distributed::ranks() == 1 && !(options.max_grad_norm > 0))
        return layer_by_layer(p, targets, optimizer, state, number, skip);
    }

    auto pass = [&](std::size_t r) {
      p.engines_[r].forward(p.mode(r));
      p.backward_replica(r, targets, P::batch_size);
    };
    if (distributed::ranks() == 1) {
      p.refresh_gemm_weights();
      p.run(pass);
    } else {
      // A fault on one rank must not leave the others waiting in the
      // step's allreduce: every rank learns of it and throws alike.
      std::exception_ptr failure;
      try {
        p.refresh_gemm_weights();
        p.run(pass);
      } catch (...) {
        failure = std::current_exception();
      }
      if (failure) skip({});
      distributed::agree_on_failure(failure);
    }
    p.gather_outputs();
    loss_value result = p.combined(P::global_batch);

    // Without clipping or ranks, each replica reduces its share of the
    // gradient and updates it at once (one wake-up of the workers).
    const bool fused = distributed::ranks() == 1 && !(options.max_grad_norm > 0);
    if (fused) {
      if (!std::isfinite(result.loss)) return skip(result);
    } else {
      result = p.reduce_gradients(result, P::global_batch);
      if (!std::isfinite(result.loss)) return skip(result);
    }
    const T scale = options.max_grad_norm > 0 ? clip_scale<T>(p.gradient_norm(), options.max_grad_norm) : T(1);
    state.prepare(optimizer, number);
    T* gradient = p.engines_[0].gradients();
    auto update = [&](std::size_t q) {
      const auto [begin, end] = P::chunk_of(q);
      if constexpr (P::replicas > 1) {
        if (fused) p.reduce_chunk(q, P::global_batch);
      }
      if (scale != T(1))
        for (std::size_t i = begin; i < end; ++i) gradient[i] *= scale;
      state.update(optimizer, p.parameters().subspan(begin, end - begin),
                   std::span<const T>(gradient + begin, end - begin), begin);
    };
    p.run(update);
    p.set_step(number);
    return result;
  }

  /// One replica, one rank, no clipping: nothing needs the whole gradient
  /// before the update, so each parameter is updated as soon as its
  /// gradient is complete, right after the backward of the first layer that
  /// uses it, while that gradient is still in cache (no separate pass over
  /// parameters, optimizer state and gradients after backward). The loss is
  /// known before backward starts, so a non-finite one skips the step
  /// before anything was updated. The update is element-wise, so this gives
  /// the bits the whole-buffer update gives.
  template <class P, class O, class State, class Skip>
  static loss_value layer_by_layer(P& p, std::span<const typename P::target_type> targets, const O& optimizer,
                                   State& state, std::uint64_t number, Skip& skip) {
    using T = typename P::scalar_type;
    const std::span<T> parameters = p.parameters();
    const T* gradient = p.engines_[0].gradients();
    bool applied = false;
    auto pass = [&](std::size_t) {
      p.engines_[0].forward(p.mode(0));
      p.start_backward(0, targets, P::batch_size);
      if (!std::isfinite(p.results_[0].loss)) return;
      state.prepare(optimizer, number);
      p.engines_[0].backward_updating(p.mode(0), [&](std::size_t begin, std::size_t end) {
        state.update(optimizer, parameters.subspan(begin, end - begin),
                     std::span<const T>(gradient + begin, end - begin), begin);
      });
      applied = true;
    };
    p.refresh_gemm_weights();
    p.run(pass);
    p.gather_outputs();
    const loss_value result = p.combined(P::global_batch);
    if (!applied) return skip(result);
    p.set_step(number);
    return result;
  }

  /// The factor that brings a gradient of L2 norm `norm` down to `max_norm`
  /// (1 when it is within it, or clipping is off).
  template <class T>
  static T clip_scale(double norm, double max_norm) noexcept {
    if (!(max_norm > 0)) return T(1);
    return norm > max_norm ? static_cast<T>(max_norm / (norm + 1e-6)) : T(1);
  }
};

}  // namespace detail

/// One training step of `p` on its input() against `targets`: forward and
/// backward on every replica, the gradient reduced over replicas and ranks,
/// clipped when asked, and `state`'s optimizer update (see the top of this
/// header). Returns the step's loss over all replicas and ranks; when it is
/// not finite, nothing was changed.
template <class P, class O, class State>
loss_value train_step(P& p, std::span<const typename P::target_type> targets, const O& optimizer, State& state,
                      step_options options = {}) {
  return detail::stepper::train(p, targets, optimizer, state, options);
}

}  // namespace kiln
