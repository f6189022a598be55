// kiln/detail/worker_pool.hpp — N pinned threads that run one task each,
// together, on demand; the replicas of replicate<N>.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>

namespace kiln::detail {

class worker_pool {
 public:
  /// Starts `n` threads. Thread r is pinned to cores[r] when cores are
  /// given; otherwise to the (first + r)-th of the cores this process may
  /// use (its affinity mask, wrapping around with a warning when there are
  /// fewer). `first` lets the ranks on one host take different cores.
  worker_pool(std::size_t n, std::span<const std::size_t> cores, std::size_t first = 0) : errors_(n) {
    const std::vector<std::size_t> allowed = allowed_cores();
    if (cores.empty() && first + n > allowed.size()) {
      std::fprintf(stderr,
                   "kiln: replicas %zu-%zu on a process allowed %zu cores: replicas will share cores (replica r "
                   "runs on allowed core (%zu + r) mod %zu)\n",
                   first, first + n - 1, allowed.size(), first, allowed.size());
    }
    threads_.reserve(n);
    for (std::size_t r = 0; r < n; ++r) {
      threads_.emplace_back([this, r] { loop(r); });
      const std::size_t core = cores.empty() ? allowed[(first + r) % allowed.size()] : cores[r];
      if (core >= CPU_SETSIZE) {
        std::fprintf(stderr, "kiln: replica %zu asks for core %zu, which cannot exist; not pinned\n", r, core);
        continue;
      }
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(core, &set);
      if (pthread_setaffinity_np(threads_.back().native_handle(), sizeof(set), &set) != 0) {
        std::fprintf(stderr, "kiln: replica %zu could not be pinned to core %zu (not available to this process)\n", r,
                     core);
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
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }

  std::size_t size() const noexcept { return threads_.size(); }

  /// Runs f(r) on every thread r and waits for all of them. If any threw,
  /// rethrows the exception of the lowest r (after all have finished).
  template <class F>
  void run(F& f) {
    {
      std::lock_guard lock(m_);
      task_ = &f;
      call_ = [](void* t, std::size_t r) { (*static_cast<F*>(t))(r); };
      pending_ = threads_.size();
      ++generation_;
    }
    start_.notify_all();
    std::unique_lock lock(m_);
    done_.wait(lock, [&] { return pending_ == 0; });
    for (auto& e : errors_) {
      if (e) {
        std::exception_ptr first = e;
        for (auto& x : errors_) x = nullptr;
        std::rethrow_exception(first);
      }
    }
  }

 private:
  void loop(std::size_t r) {
    std::size_t seen = 0;
    for (;;) {
      void* task;
      void (*call)(void*, std::size_t);
      {
        std::unique_lock lock(m_);
        start_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        task = task_;
        call = call_;
      }
      try {
        call(task, r);
      } catch (...) {
        errors_[r] = std::current_exception();
      }
      {
        std::lock_guard lock(m_);
        if (--pending_ == 0) done_.notify_one();
      }
    }
  }

  std::mutex m_;
  std::condition_variable start_, done_;
  std::size_t generation_ = 0, pending_ = 0;
  bool stop_ = false;
  void* task_ = nullptr;
  void (*call_)(void*, std::size_t) = nullptr;
  std::vector<std::exception_ptr> errors_;
  std::vector<std::thread> threads_;
};

}  // namespace kiln::detail
