// A rank killed mid-run leaves the last checkpoint loadable. Built twice:
//
//   with kiln::mpi, the run:  mpirun -np 2 kiln_mpi_kill_run DIR
//     each rank writes its PID to DIR/pid-R, then trains until it is killed,
//     rank 0 saving a checkpoint after every epoch in DIR/checkpoints;
//   without MPI, the test:    kiln_mpi_kill_test MPIRUN RUN WORK_DIR
//     starts the run again and again, and once a checkpoint is there
//     SIGKILLs one rank (rank 0, the one that saves, or rank 1) at a varied
//     moment: as soon as a save begins, or after a delay. Then
//     mpirun must end within 20 s (no rank left waiting in an allreduce, no
//     rank left running), and every epoch-NNNN.kiln left in the directory
//     (never a temporary) must load into a fresh program and be, byte for
//     byte, the checkpoint an uninterrupted run writes at that epoch (one
//     process with replicate<2>: bit for bit what two ranks compute), the
//     newest no older than the one seen before the kill; a run resumed from
//     the newest continues to the next epoch's checkpoint, bit for bit, and
//     its save removes the temporary a killed save left.
#include <kiln/kiln.hpp>

#include "../support/blobs.hpp"

#include <fmt/ranges.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {
namespace fs = std::filesystem;
using namespace kiln;

/// Big enough (266,000 parameters: 2 MiB a checkpoint with the momentum)
/// that a save takes a while: a kill can land in its write, not only around it.
using net = model<input<6>, dense<512>, relu, dense<512>, relu, dense<3>>;
constexpr std::size_t samples = 48, batch_size = 8;  // 2 workers: 2 ranks × 1 replica, or 1 × replicate<2>
constexpr std::uint64_t fit_seed = 5;

dataset training_set() { return kiln::testing::blobs(samples, 1, {6}); }
sgd optimizer() { return sgd{.lr = 0.05f, .momentum = 0.9f}; }
fit_options options(const fs::path& checkpoints) {
  return {.seed = fit_seed, .progress = progress_mode::none, .checkpoint_dir = checkpoints, .keep_checkpoints = 2};
}
}  // namespace

#if defined(KILN_WITH_MPI)

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const fs::path dir = argv[1];
  auto p = compile<net, batch<batch_size>, replicate<1>>(7);
  trainer t{p, optimizer()};
  const int me = distributed::rank();
  const fs::path pid_file = dir / ("pid-" + std::to_string(me));
  std::ofstream(fs::path(pid_file).concat(".new")) << ::getpid() << '\n';
  fs::rename(fs::path(pid_file).concat(".new"), pid_file);  // whole, or not there
  t.fit(training_set(), epochs{9000}, options(dir / "checkpoints"));
  std::printf("rank %d: WRONG: trained 9000 epochs and was never killed\n", me);
  return 1;
}

#else

namespace {
using clock_type = std::chrono::steady_clock;
constexpr std::size_t steps_per_epoch = samples / (batch_size * 2);

std::vector<char> bytes_of(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

long pid_in(const fs::path& f) {
  long pid = 0;
  std::ifstream(f) >> pid;
  return pid;
}

/// Whether process `pid` still runs (a zombie has ended).
bool running(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

/// The epochs of the checkpoints in `dir` (fit's names only), in order, and how many temporaries are there.
std::pair<std::vector<std::uint64_t>, std::size_t> checkpoints_in(const fs::path& dir) {
  std::vector<std::uint64_t> found;
  std::size_t temporaries = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (const auto e = checkpoint_epoch_of(name))
      found.push_back(*e);
    else if (name.find(".tmp-") != std::string::npos)
      ++temporaries;
  }
  std::sort(found.begin(), found.end());
  return {found, temporaries};
}

/// mpirun -np 2 RUN DIR in its own process group, its output in DIR/mpirun.log.
pid_t start(const char* mpirun, const char* run, const fs::path& dir) {
  const std::string log = (dir / "mpirun.log").string(), where = dir.string();
  const pid_t child = ::fork();
  if (child != 0) return child;
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the test killed (its timeout): mpirun goes too
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 1), ::dup2(fd, 2);
  ::execl(mpirun, mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "btl", "self,tcp", "--mca",
          "btl_tcp_if_include", "lo", "--mca", "oob_tcp_if_include", "lo", run, where.c_str(),
          static_cast<char*>(nullptr));
  std::perror("exec mpirun");
  ::_exit(127);
}

/// Waits up to `limit` for `child` to end; its wait status, or nothing.
std::optional<int> wait_for(pid_t child, std::chrono::milliseconds limit) {
  const auto until = clock_type::now() + limit;
  for (;;) {
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) return status;
    if (clock_type::now() > until) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

/// The checkpoint bytes an uninterrupted run writes after each epoch: one
/// process with replicate<2> takes the steps two ranks of one replica take, bit for bit.
class uninterrupted_run {
 public:
  explicit uninterrupted_run(fs::path file) : file_(std::move(file)) {}
  const std::vector<char>& checkpoint_at(std::uint64_t epoch) {
    while (saved_.size() < epoch) {
      trainer_.fit(data_, epochs{1}, {.seed = fit_seed, .progress = progress_mode::none});
      trainer_.save(file_, fit_seed);
      saved_.push_back(bytes_of(file_));
    }
    return saved_[epoch - 1];
  }

 private:
  fs::path file_;
  dataset data_ = training_set();
  decltype(compile<net, batch<batch_size>, replicate<2>>(7)) program_ =
      compile<net, batch<batch_size>, replicate<2>>(7);
  trainer<decltype(program_), sgd> trainer_{program_, optimizer()};
  std::vector<std::vector<char>> saved_;
};

int failures = 0;
template <class... A>
void wrong(int run, fmt::format_string<A...> what, A&&... a) {
  fmt::print("run {}: WRONG: {}\n", run, fmt::format(what, std::forward<A>(a)...));
  std::fflush(stdout);
  ++failures;
}

/// One run: start, kill rank `victim` (during a save, or `delay` after the
/// first checkpoint), then check what is left.
void run_once(int run, const char* mpirun, const char* program, const fs::path& dir, int victim,
              std::optional<std::chrono::milliseconds> delay, uninterrupted_run& reference) {
  fs::remove_all(dir);
  const fs::path checkpoints = dir / "checkpoints";
  fs::create_directories(checkpoints);
  const pid_t job = start(mpirun, program, dir);
  long pid[2] = {0, 0};
  auto end_job = [&] {
    ::kill(-job, SIGKILL);
    for (long p : pid)
      if (p > 0 && running(p)) ::kill(static_cast<pid_t>(p), SIGKILL);
    wait_for(job, std::chrono::seconds(10));
  };

  // Both ranks started, and a checkpoint written.
  const auto ready_by = clock_type::now() + std::chrono::seconds(30);
  while (!(fs::exists(dir / "pid-0") && fs::exists(dir / "pid-1") && !checkpoints_in(checkpoints).first.empty())) {
    if (clock_type::now() > ready_by || wait_for(job, std::chrono::milliseconds(0))) {
      wrong(run, "no checkpoint 30 s after mpirun started, or it ended first; its output:\n{}",
            std::string(bytes_of(dir / "mpirun.log").data(), bytes_of(dir / "mpirun.log").size()));
      end_job();
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  pid[0] = pid_in(dir / "pid-0"), pid[1] = pid_in(dir / "pid-1");

  // The kill: as soon as a save has begun (a new file in the directory: the
  // save's temporary, or the checkpoint itself were it written in place),
  // or after the delay.
  std::uint64_t seen = checkpoints_in(checkpoints).first.back();
  std::string when;
  if (delay) {
    std::this_thread::sleep_for(*delay);
    when = fmt::format("{} ms after the first checkpoint", delay->count());
  } else {
    const auto until = clock_type::now() + std::chrono::seconds(10);
    for (;;) {
      const auto [epochs_there, temporaries] = checkpoints_in(checkpoints);
      if (temporaries > 0 || (!epochs_there.empty() && epochs_there.back() > seen) || clock_type::now() > until) break;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    when = clock_type::now() < until ? "as rank 0 began a save" : "(no save begun in 10 s)";
  }
  seen = checkpoints_in(checkpoints).first.back();
  ::kill(static_cast<pid_t>(pid[victim]), SIGKILL);
  const auto killed_at = clock_type::now();

  // mpirun ends, and no rank runs on.
  const auto status = wait_for(job, std::chrono::seconds(20));
  if (!status) {
    wrong(run, "mpirun still runs 20 s after rank {} was killed: a hang", victim);
    end_job();
    return;
  }
  const double took = std::chrono::duration<double>(clock_type::now() - killed_at).count();
  if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) wrong(run, "mpirun says the job succeeded");
  for (int r = 0; r < 2; ++r) {
    const auto until = clock_type::now() + std::chrono::seconds(5);
    while (running(pid[r]) && clock_type::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (running(pid[r])) {
      wrong(run, "rank {} still runs after mpirun ended", r);
      ::kill(static_cast<pid_t>(pid[r]), SIGKILL);
    }
  }

  // Every checkpoint left loads, and is the uninterrupted run's.
  const auto [found, temporaries] = checkpoints_in(checkpoints);
  if (found.empty()) return wrong(run, "no checkpoint left");
  if (found.back() < seen)
    wrong(run, "the newest checkpoint is of epoch {}, but epoch {} was there before", found.back(), seen);
  for (const std::uint64_t e : found) {
    const fs::path file = checkpoints / checkpoint_file_name(e);
    auto fresh = compile<net, batch<batch_size>, replicate<2>>(99);
    trainer t{fresh, optimizer()};
    try {
      const training_position at = t.load(file);
      if (at.epoch != e || at.step != e * steps_per_epoch || at.step_in_epoch != 0)
        wrong(run, "{} holds epoch {}, step {}; expected epoch {}, step {}", file.filename().string(), at.epoch,
              at.step, e, e * steps_per_epoch);
    } catch (const checkpoint_error& error) {
      wrong(run, "{} does not load: {}", file.filename().string(), error.what());
      continue;
    }
    if (bytes_of(file) != reference.checkpoint_at(e))
      wrong(run, "{} differs from the uninterrupted run's checkpoint of epoch {}", file.filename().string(), e);
  }

  // A run resumed from the newest continues, and its save clears the temporaries.
  const std::uint64_t next = found.back() + 1;
  auto resumed = compile<net, batch<batch_size>, replicate<2>>(98);
  trainer t{resumed, optimizer()};
  try {
    t.load(checkpoints / checkpoint_file_name(found.back()));
    t.fit(training_set(), epochs{1}, options(checkpoints));
  } catch (const std::exception& error) {
    return wrong(run, "resuming from epoch {} failed: {}", found.back(), error.what());
  }
  if (t.steps_done() != next * steps_per_epoch)
    wrong(run, "resumed to {} steps, expected {}", t.steps_done(), next * steps_per_epoch);
  if (bytes_of(checkpoints / checkpoint_file_name(next)) != reference.checkpoint_at(next))
    wrong(run, "the resumed run's checkpoint of epoch {} differs from the uninterrupted run's", next);
  if (const std::size_t left = checkpoints_in(checkpoints).second; left != 0)
    wrong(run, "{} temporaries left after the resumed run's save", left);

  fmt::print(
      "run {}: rank {} killed {} (epoch {} saved); mpirun ended {:.2f} s later ({}); checkpoints of epochs {} "
      "left{}, each loads as the uninterrupted run's; resumed to epoch {}\n",
      run, victim, when, seen, took,
      WIFSIGNALED(*status) ? fmt::format("signal {}", WTERMSIG(*status)) : fmt::format("exit {}", WEXITSTATUS(*status)),
      fmt::join(found, ", "), temporaries ? fmt::format(" and {} temporary of a save cut short", temporaries) : "",
      next);
  std::fflush(stdout);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MPIRUN RUN WORK_DIR\n", argc > 0 ? argv[0] : "kiln_mpi_kill_test");
    return 2;
  }
  const fs::path work = argv[3];
  fs::create_directories(work);
  uninterrupted_run reference(work / "reference.kiln");
  // Each rank in turn; at a save seen in progress (no delay given), or after a varied delay.
  using ms = std::chrono::milliseconds;
  const std::optional<ms> moments[] = {{}, {}, ms(0), ms(40), {}, ms(130), ms(270), {}};
  int run = 0;
  for (const auto& moment : moments) {
    run_once(run, argv[1], argv[2], work / ("run-" + std::to_string(run)), run % 2, moment, reference);
    ++run;
  }
  fmt::print("{} runs, {} faults\n", run, failures);
  return failures == 0 ? 0 : 1;
}

#endif
