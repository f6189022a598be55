// kiln/detail/progress.hpp — what the trainer prints while it works.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <unistd.h>

namespace kiln::detail {

inline std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

/// A progress bar redrawn in place on a terminal, or nothing between the
/// per-epoch lines elsewhere (logs, CI).
class progress_bar {
 public:
  progress_bar(std::FILE* out, bool live) : out_(out), live_(live) {}

  void update(std::size_t epoch, std::size_t epochs, std::size_t step, std::size_t steps, double loss,
              double samples_per_second, double elapsed) {
    if (!live_ || !out_) return;
    const auto now = std::chrono::steady_clock::now();
    if (step != steps && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr std::size_t width = 24;
    const std::size_t filled = steps ? width * step / steps : width;
    const double eta = step ? elapsed / static_cast<double>(step) * static_cast<double>(steps - step) : 0.0;
    fmt::print(out_, "\r\033[Kepoch {}/{} [{}{}] {}/{} loss {:.4f} {:.0f} samples/s ETA {}", epoch, epochs,
               std::string(filled, '='), std::string(width - filled, ' '), step, steps, loss, samples_per_second,
               format_duration(eta));
    std::fflush(out_);
  }
  void clear() {
    if (live_ && out_) fmt::print(out_, "\r\033[K");
  }

 private:
  std::FILE* out_;
  bool live_;
  std::chrono::steady_clock::time_point last_{};
};

inline bool is_terminal(std::FILE* f) { return f && ::isatty(::fileno(f)) == 1; }

}  // namespace kiln::detail
