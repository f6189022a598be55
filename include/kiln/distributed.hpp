// kiln/distributed.hpp — the processes of a training run.
//
// WHAT IT IS
//   Where kiln is built with MPI (link the CMake target kiln::mpi, which
//   defines KILN_WITH_MPI), a program started under `mpirun -np R` is one of R
//   ranks: kiln initialises MPI on first use (MPI_THREAD_FUNNELED; finalised
//   at exit), the trainer shards each epoch over all R × N replicas, and every
//   step's gradient goes through one MPI_Allreduce over the flat buffer, so
//   all ranks take the identical step. Without MPI, or run without mpirun,
//   there is one rank and these functions cost nothing.
//
//   rank(), ranks()        this process and how many there are
//   is_primary()           rank 0: the one that prints and writes files
//   allreduce_sum(data)    element-wise sum over all ranks, in place
//   broadcast_from_primary(data)   rank 0's values on every rank
//   all_equal(data)        true when every rank holds the same bytes
//   abort(message)         prints and ends every rank of the job
//   agree_on_failure(e)    one collective: when any rank's step failed, every
//                          rank throws the same rank_failure (no rank is left
//                          waiting in a later collective)
//
// THREAD SAFETY
//   Call from the thread that drives training (the trainer does).
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#if defined(KILN_WITH_MPI)
#include <mpi.h>
#endif

namespace kiln::distributed {

#if defined(KILN_WITH_MPI)
namespace detail {
inline void ensure_initialized() {
  static const bool once = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      std::atexit([] {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
      });
    }
    return true;
  }();
  (void)once;
}
template <class T>
MPI_Datatype datatype() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else
    return MPI_BYTE;
}
}  // namespace detail

inline int rank() {
  detail::ensure_initialized();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int ranks() {
  detail::ensure_initialized();
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
/// MPI counts are ints: large buffers go in pieces of at most 2^30 elements.
inline constexpr std::size_t max_count = std::size_t{1} << 30;

template <class T>
void allreduce_sum(std::span<T> data) {
  if (ranks() == 1) return;
  for (std::size_t at = 0; at < data.size(); at += max_count) {
    const auto n = static_cast<int>(std::min(max_count, data.size() - at));
    if (MPI_Allreduce(MPI_IN_PLACE, data.data() + at, n, detail::datatype<T>(), MPI_SUM, MPI_COMM_WORLD) != MPI_SUCCESS)
      throw std::runtime_error("kiln::distributed::allreduce_sum: MPI_Allreduce failed");
  }
}
template <class T>
bool all_equal(std::span<const T> data) {
  if (ranks() == 1) return true;
  std::vector<unsigned char> first(data.size_bytes());
  std::memcpy(first.data(), data.data(), data.size_bytes());
  for (std::size_t at = 0; at < first.size(); at += max_count)
    MPI_Bcast(first.data() + at, static_cast<int>(std::min(max_count, first.size() - at)), MPI_BYTE, 0, MPI_COMM_WORLD);
  int same = std::memcmp(first.data(), data.data(), data.size_bytes()) == 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}
/// The lowest rank whose `failed` is true, or ranks() when none is (one
/// MPI_Allreduce of an int).
inline int first_failing_rank(bool failed) {
  if (ranks() == 1) return failed ? 0 : 1;
  int mine = failed ? rank() : ranks(), first = 0;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return first;
}
/// `text` as rank `root` has it, on every rank.
inline void broadcast_text(std::string& text, int root) {
  if (ranks() == 1) return;
  unsigned long long n = text.size();
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, MPI_COMM_WORLD);
  text.resize(static_cast<std::size_t>(n));
  MPI_Bcast(text.data(), static_cast<int>(std::min<unsigned long long>(n, max_count)), MPI_CHAR, root, MPI_COMM_WORLD);
}
/// Prints `message` on stderr and ends every rank of the job.
[[noreturn]] inline void abort(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}
inline constexpr bool with_mpi = true;
#else
inline int rank() { return 0; }
inline int ranks() { return 1; }
template <class T>
void allreduce_sum(std::span<T>) {}
template <class T>
bool all_equal(std::span<const T>) {
  return true;
}
inline int first_failing_rank(bool failed) { return failed ? 0 : 1; }
inline void broadcast_text(std::string&, int) {}
[[noreturn]] inline void abort(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::abort();
}
inline constexpr bool with_mpi = false;
#endif

inline bool is_primary() { return rank() == 0; }

/// Every rank gets rank 0's values (an allreduce of rank 0's values and
/// zeros elsewhere: exact, since x + 0 = x).
template <class T>
void broadcast_from_primary(std::span<T> data) {
  if (ranks() == 1) return;
  if (!is_primary()) std::fill(data.begin(), data.end(), T(0));
  allreduce_sum(data);
}

/// This process's index among the ranks on its host (from the launcher's
/// environment: Open MPI, MPICH, Slurm), 0 when launched alone. Replica
/// threads are pinned from local_rank() × replicas on.
inline std::size_t local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* v = std::getenv(name)) return static_cast<std::size_t>(std::strtoul(v, nullptr, 10));
  return 0;
}

/// A training step failed on some rank: every rank throws this, with the
/// same message (the failing rank's error), so none waits for the others.
class rank_failure : public std::runtime_error {
 public:
  rank_failure(int failed_rank, const std::string& what) : std::runtime_error(what), rank_(failed_rank) {}
  /// The lowest rank whose step failed.
  int failed_rank() const noexcept { return rank_; }

 private:
  int rank_;
};

/// Called by every rank at the same point of a step with what this rank's
/// part raised (null: nothing). Returns when no rank failed; otherwise every
/// rank throws the same rank_failure, naming the lowest failing rank and its
/// error. With one rank, the error itself is rethrown.
inline void agree_on_failure(std::exception_ptr failure) {
  if (ranks() == 1) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  const int first = first_failing_rank(failure != nullptr);
  if (first >= ranks()) return;
  std::string what;
  if (first == rank()) {
    try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
      what = "an exception that is not a std::exception";
    }
  }
  broadcast_text(what, first);
  throw rank_failure(first, "kiln: rank " + std::to_string(first) + " of " + std::to_string(ranks()) +
                                " failed in a training step, so every rank stops: " + what);
}

}  // namespace kiln::distributed
