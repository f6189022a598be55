// kiln/detail/progress.hpp — what the trainer prints while it works.
//
// WHAT IT IS
//   progress_bar   one line redrawn in place ("\r\033[K" then the text), at
//                  most 10 times a second and at an epoch's last step, never
//                  wider than the terminal: the bar shrinks first, then the
//                  rate goes, then the bar, then the ETA, and what is left is
//                  cut.
//   terminal_width the width of the terminal a FILE is on (TIOCGWINSZ, asked
//                  at each redraw so a resized window is followed), else
//                  $COLUMNS, else 80.
//   draws_live     whether fit draws the bar: only the primary MPI rank, and
//                  with progress_mode::automatic only on a terminal (never
//                  into a pipe or a file); progress_mode::bar forces it.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <kiln/fit_options.hpp>

namespace kiln::detail {

inline std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
                   : fmt::format("{}:{:02}", s / 60, s % 60);
}

inline bool is_terminal(std::FILE* f) { return f && ::isatty(::fileno(f)) == 1; }

inline std::size_t terminal_width(std::FILE* f) {
  winsize w{};
  if (f && ::ioctl(::fileno(f), TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long v = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && v > 0 && v <= 10'000) return static_cast<std::size_t>(v);
  }
  return 80;
}

inline bool draws_live(progress_mode mode, std::FILE* out, bool primary) {
  return primary && out && (mode == progress_mode::bar || (mode == progress_mode::automatic && is_terminal(out)));
}

/// The bar's text for a terminal `width` columns wide: at most width − 1
/// characters (the last column is left free, so no terminal wraps).
inline std::string progress_line(std::size_t width, std::size_t epoch, std::size_t epochs, std::size_t step,
                                 std::size_t steps, double loss, double samples_per_second, double elapsed) {
  const std::size_t room = width > 1 ? width - 1 : 0;
  const double eta = step ? elapsed / static_cast<double>(step) * static_cast<double>(steps - step) : 0.0;
  const std::string head = fmt::format("epoch {}/{}", epoch, epochs);
  const std::string counts = fmt::format("{}/{} loss {:.4f}", step, steps, loss);
  const std::string rate = fmt::format(" {:.0f} samples/s", samples_per_second);
  const std::string eta_text = fmt::format(" ETA {}", format_duration(eta));
  // Drop the rate until a bar of 10 fits; else no bar.
  for (const std::string& tail : {rate + eta_text, eta_text}) {
    const std::size_t fixed = head.size() + counts.size() + tail.size() + 4;  // " [" "] "
    if (fixed + 10 > room) continue;
    const std::size_t bar = std::min<std::size_t>(room - fixed, 40);
    const std::size_t filled = steps ? bar * step / steps : bar;
    return fmt::format("{} [{}{}] {}{}", head, std::string(filled, '='), std::string(bar - filled, ' '), counts, tail);
  }
  // No room for a bar: the counts, and the ETA if it fits; else cut.
  std::string plain = fmt::format("{} {}{}", head, counts, eta_text);
  if (plain.size() > room) plain.resize(std::min(head.size() + 1 + counts.size(), room));
  return plain;
}

/// A progress bar redrawn in place on a terminal, or nothing between the
/// per-epoch lines elsewhere (logs, CI). `width` 0: the terminal's.
class progress_bar {
 public:
  progress_bar(std::FILE* out, bool live, std::size_t width = 0) : out_(out), live_(live), width_(width) {}

  void update(std::size_t epoch, std::size_t epochs, std::size_t step, std::size_t steps, double loss,
              double samples_per_second, double elapsed) {
    if (!live_ || !out_) return;
    const auto now = std::chrono::steady_clock::now();
    if (step != steps && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const std::size_t width = width_ ? width_ : terminal_width(out_);
    fmt::print(out_, "\r\033[K{}", progress_line(width, epoch, epochs, step, steps, loss, samples_per_second, elapsed));
    std::fflush(out_);
  }
  void clear() {
    if (live_ && out_) fmt::print(out_, "\r\033[K");
  }

 private:
  std::FILE* out_;
  bool live_;
  std::size_t width_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace kiln::detail
