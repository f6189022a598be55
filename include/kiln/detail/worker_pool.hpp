// kiln/detail/worker_pool.hpp — the replicas of replicate<N>: N tasks run
// together on demand, each on its own pinned core; task 0 on the calling
// thread, tasks 1…N−1 on threads of the pool's.
//
// HAND-OFF. A training step hands its replicas work twice (forward and
// backward, then reduce and update), so the hand-off is on the step's
// critical path. Waking a sleeping thread through a condition variable
// costs tens of microseconds in these VMs (a step of the Fashion-MNIST MLP
// at 32 samples a replica takes ≈ 400 µs), and a third thread (a caller
// that only waits) on two cores gets a core only by taking it from a
// replica. So the caller runs task 0 itself, on replica 0's core (moved
// there for the task when it runs elsewhere), and every waiting side spins for a while (about 100 µs)
// before it sleeps (std::atomic::wait): between the two hand-offs of a step,
// and from one step to the next, nobody sleeps. Where the replicas
// outnumber the cores the process may use, nobody spins.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace kiln::detail {

class worker_pool {
 public:
  /// Runs `n` tasks at a time. Task r is pinned to cores[r] when cores are
  /// given; otherwise to the (first + r)-th of the cores this process may
  /// use (its affinity mask, wrapping around with a warning when there are
  /// fewer). `first` lets the ranks on one host take different cores.
  worker_pool(std::size_t n, std::span<const std::size_t> cores, std::size_t first = 0) : errors_(n), cores_(n) {
    const std::vector<std::size_t> allowed = allowed_cores();
    if (cores.empty() && first + n > allowed.size()) {
      std::fprintf(stderr,
                   "kiln: replicas %zu-%zu on a process allowed %zu cores: replicas will share cores (replica r "
                   "runs on allowed core (%zu + r) mod %zu)\n",
                   first, first + n - 1, allowed.size(), first, allowed.size());
    }
    for (std::size_t r = 0; r < n; ++r) {
      cores_[r] = cores.empty() ? allowed[(first + r) % allowed.size()] : cores[r];
      if (cores_[r] >= CPU_SETSIZE) {
        std::fprintf(stderr, "kiln: replica %zu asks for core %zu, which cannot exist; not pinned\n", r, cores_[r]);
      }
    }
    // Spin only where every task has a core of its own.
    std::vector<std::size_t> distinct = cores_;
    std::sort(distinct.begin(), distinct.end());
    spin_ = std::adjacent_find(distinct.begin(), distinct.end()) == distinct.end() &&
            std::all_of(distinct.begin(), distinct.end(), [&](std::size_t c) {
              return std::find(allowed.begin(), allowed.end(), c) != allowed.end();
            });
    threads_.reserve(n > 0 ? n - 1 : 0);
    for (std::size_t r = 1; r < n; ++r) {
      threads_.emplace_back([this, r] { loop(r); });
      if (cores_[r] < CPU_SETSIZE && !pin(threads_.back().native_handle(), cores_[r])) {
        std::fprintf(stderr, "kiln: replica %zu could not be pinned to core %zu (not available to this process)\n", r,
                     cores_[r]);
      }
    }
  }

  /// The cores this process may run on, in order.
  static std::vector<std::size_t> allowed_cores() {
    std::vector<std::size_t> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      for (std::size_t c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) out.push_back(c);
    }
    if (out.empty()) {
      const std::size_t machine = std::max(1u, std::thread::hardware_concurrency());
      for (std::size_t c = 0; c < machine; ++c) out.push_back(c);
    }
    return out;
  }
  worker_pool(const worker_pool&) = delete;
  worker_pool& operator=(const worker_pool&) = delete;
  ~worker_pool() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : threads_) t.join();
  }

  /// Tasks run together: the n of the constructor.
  std::size_t size() const noexcept { return cores_.size(); }
  /// Whether waiting sides spin before they sleep (every task has a core).
  bool spins() const noexcept { return spin_; }

  /// Runs f(r) for every r < size(), f(0) on the calling thread (moved to
  /// replica 0's core for it when elsewhere, its own affinity restored), and
  /// returns when all have finished. If any threw, rethrows the exception of
  /// the lowest r (after all have finished).
  template <class F>
  void run(F& f) {
    task_ = &f;
    call_ = [](void* t, std::size_t r) { (*static_cast<F*>(t))(r); };
    pending_.store(static_cast<unsigned>(threads_.size()), std::memory_order_relaxed);
    if (!threads_.empty()) {
      generation_.fetch_add(1, std::memory_order_release);
      generation_.notify_all();
    }
    {
      const calling_thread_on here(cores_[0]);
      try {
        f(std::size_t{0});
      } catch (...) {
        errors_[0] = std::current_exception();
      }
    }
    for (unsigned left; (left = pending_.load(std::memory_order_acquire)) != 0;) await_change(pending_, left);
    for (auto& e : errors_) {
      if (e) {
        std::exception_ptr first = e;
        for (auto& x : errors_) x = nullptr;
        std::rethrow_exception(first);
      }
    }
  }

 private:
  static bool pin(pthread_t thread, std::size_t core) noexcept {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    return pthread_setaffinity_np(thread, sizeof(set), &set) == 0;
  }

  /// Moves the calling thread to `core` (pinning it there while this
  /// lives, then giving it back the affinity it had), unless it runs there
  /// already: changing a thread's affinity costs microseconds in a VM, and
  /// once moved, the caller mostly stays where it is between steps.
  class calling_thread_on {
   public:
    explicit calling_thread_on(std::size_t core) noexcept {
      if (core >= CPU_SETSIZE || static_cast<std::size_t>(sched_getcpu()) == core) return;
      if (pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_) != 0) return;
      restore_ = pin(pthread_self(), core);
    }
    ~calling_thread_on() {
      if (restore_) pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
    }
    calling_thread_on(const calling_thread_on&) = delete;
    calling_thread_on& operator=(const calling_thread_on&) = delete;

   private:
    cpu_set_t saved_{};
    bool restore_ = false;
  };

  /// Waits until `a` no longer holds `old`: spinning first when every task
  /// has a core of its own, then asleep.
  template <class V>
  void await_change(const std::atomic<V>& a, V old) const noexcept {
    if (spin_) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
      for (unsigned i = 1;; ++i) {
        if (a.load(std::memory_order_acquire) != old) return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if (i % 64 == 0 && std::chrono::steady_clock::now() > until) break;
      }
    }
    a.wait(old, std::memory_order_acquire);
  }

  void loop(std::size_t r) {
    unsigned seen = 0;
    for (;;) {
      await_change(generation_, seen);
      seen = generation_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_relaxed)) return;
      try {
        call_(task_, r);
      } catch (...) {
        errors_[r] = std::current_exception();
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  std::atomic<unsigned> generation_{0};  ///< bumped for every task handed out (and to stop)
  std::atomic<unsigned> pending_{0};     ///< pool threads still running the current task
  std::atomic<bool> stop_{false};
  bool spin_ = false;
  void* task_ = nullptr;
  void (*call_)(void*, std::size_t) = nullptr;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::size_t> cores_;  ///< task r's core
  std::vector<std::thread> threads_;  ///< task r + 1's thread
};

}  // namespace kiln::detail
