// kiln/detail/checkpoint_file.hpp — a checkpoint's bytes to and from disk:
// written atomically (temporary file, fsync, rename; through symbolic
// links), the temporaries of killed saves removed, a file read whole.
#pragma once
#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <kiln/checkpoint_error.hpp>
#include <kiln/checkpoint_format.hpp>

namespace kiln::detail {

/// Where a save to `file` lands: `file` itself, or for a symbolic link the
/// file it points to (followed link after link), so the link stays a link.
inline std::filesystem::path save_target(const std::filesystem::path& file) {
  std::filesystem::path p = file;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!std::filesystem::is_symlink(p, ec)) return p;
    const auto to = std::filesystem::read_symlink(p, ec);
    if (ec) throw checkpoint_error(checkpoint_fault::io, file, "cannot read the symbolic link: " + ec.message());
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  throw checkpoint_error(checkpoint_fault::io, file, "too many levels of symbolic links");
}

/// `.NAME.tmp-PID` names the temporary file of a save by process PID.
inline std::string temporary_name(const std::filesystem::path& file, long pid) {
  return fmt::format(".{}.tmp-{}", file.filename().string(), pid);
}

/// Removes the temporary files that saves killed part-way left in `dir`: a
/// `.NAME.tmp-PID` whose process PID no longer runs on this machine and
/// whose bytes begin like a checkpoint (or are a prefix of its magic), so
/// another program's files are never touched. Best effort: errors are ignored.
inline void remove_stale_temporaries(const std::filesystem::path& dir) {
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto mark = name.rfind(".tmp-");
    if (name.size() < 7 || name[0] != '.' || mark == std::string::npos || mark < 2) continue;
    const std::string digits = name.substr(mark + 5);
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    const long pid = std::stol(digits);
    if (pid <= 0 || pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code entry;  // (ec belongs to the iteration)
    if (it->is_symlink(entry) || !it->is_regular_file(entry)) continue;
    char head[8] = {};
    std::ifstream in(it->path(), std::ios::binary);
    in.read(head, sizeof head);
    if (std::memcmp(head, checkpoint_magic.data(), static_cast<std::size_t>(in.gcount())) != 0) continue;
    std::filesystem::remove(it->path(), entry);
  }
}

/// Writes `bytes` to `file` atomically: temporary file, fsync, rename, fsync
/// of the directory. A symbolic link is written through (see save_target).
inline void write_atomically(const std::filesystem::path& file, std::span<const unsigned char> bytes) {
  const auto target = save_target(file);
  const auto dir = target.has_parent_path() ? target.parent_path() : std::filesystem::path(".");
  remove_stale_temporaries(dir);
  const auto tmp = dir / temporary_name(target, ::getpid());
  auto fail = [&](const char* what) {
    const int e = errno;
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw checkpoint_error(checkpoint_fault::io, file, fmt::format("{}: {}", what, std::strerror(e)));
  };
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create the temporary file");
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      fail("cannot write");
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    fail("cannot flush to disk");
  }
  if (::close(fd) != 0) fail("cannot close");
  if (std::rename(tmp.c_str(), target.c_str()) != 0) fail("cannot move into place");
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

/// Reads the whole of `file` (never more than it holds).
inline std::vector<unsigned char> read_checkpoint_file(const std::filesystem::path& file) {
  std::vector<std::uint8_t> bytes;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) throw checkpoint_error(checkpoint_fault::missing, file, "no such file");
  struct closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, closer> f(std::fopen(file.c_str(), "rb"));
  if (!f || !std::filesystem::is_regular_file(file, ec))
    throw checkpoint_error(
        checkpoint_fault::io, file,
        f ? std::string("not a regular file") : fmt::format("cannot be read: {}", std::strerror(errno)));
  // The file's size, and one byte to see its end; more only if it grows meanwhile.
  const auto size = std::filesystem::file_size(file, ec);
  std::size_t want = ec ? std::size_t{1} << 20 : static_cast<std::size_t>(size) + 1;
  for (;;) {
    const std::size_t at = bytes.size();
    bytes.resize(at + want);
    const std::size_t got = std::fread(bytes.data() + at, 1, want, f.get());
    bytes.resize(at + got);
    if (got < want) break;
    want = std::max(std::size_t{1} << 20, bytes.size());
  }
  if (std::ferror(f.get()))
    throw checkpoint_error(checkpoint_fault::io, file, fmt::format("cannot be read: {}", std::strerror(errno)));
  return bytes;
}

}  // namespace kiln::detail
