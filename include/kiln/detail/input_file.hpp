// kiln/detail/input_file.hpp — reading files that come from outside.
//
// `input_file` hands out a file's bytes, plain or gzip-decoded, and never
// more than the file (or, for gzip, the decompressed stream) actually
// delivers: callers grow their buffers as bytes arrive, and a plain file's
// remaining size bounds an announced length before anything is allocated.
// gzip input goes through zlib's inflate, which checks every member's
// CRC-32 and length trailer; members may follow each other (RFC 1952, what
// `cat a.gz b.gz` makes), anything else after the last one is an error.
// Faults are reported through the caller's `fail(what)`, which throws.
#pragma once

#include <kiln/detail/internal_header.hpp>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

namespace kiln::detail {

class input_file {
 public:
  /// Reports a fault: must throw (an exception that names the file).
  using failure = std::function<void(const std::string&)>;

  input_file(const std::filesystem::path& file, failure fail) : fail_(std::move(fail)) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec))
      fault(std::filesystem::exists(file, ec) ? "not a regular file" : "no such file");
    f_.reset(std::fopen(file.c_str(), "rb"));
    if (!f_) fault(fmt::format("cannot be opened for reading: {}", std::strerror(errno)));
    const auto size = std::filesystem::file_size(file, ec);
    size_ = ec ? 0 : size;
    gzip_ = fill(2) >= 2 && in_[0] == 0x1f && in_[1] == 0x8b;
    if (gzip_) {
      z_ = std::make_unique<z_stream>();
      if (inflateInit2(z_.get(), 16 + MAX_WBITS) != Z_OK) fault("zlib cannot start (out of memory)");
    }
  }
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;
  ~input_file() {
    if (z_) inflateEnd(z_.get());
  }

  bool gzip() const noexcept { return gzip_; }

  /// The most bytes that can still come, when the file says (plain files);
  /// gzip input has no such bound before it is decompressed.
  std::optional<std::uint64_t> bound() const noexcept {
    if (gzip_) return std::nullopt;
    return size_ > consumed_ ? size_ - consumed_ : 0;
  }

  /// Up to `n` bytes into `into`; fewer only at the end of the data (for
  /// gzip, an end whose trailers all checked out).
  std::size_t read(unsigned char* into, std::size_t n) { return gzip_ ? inflate_into(into, n) : copy_into(into, n); }

  /// Reads gzip input to its end, keeping nothing, so that damage anywhere in
  /// it is reported as such (corrupt, truncated) before a complaint about
  /// what the damaged bytes seem to say. Plain input: nothing to do.
  void check_rest() {
    if (!gzip_) return;
    unsigned char sink[4096];
    while (read(sink, sizeof sink) > 0) {
    }
  }

  /// Appends to `v` until it holds `n` bytes or the data ends, growing it
  /// only as bytes arrive: from a plain file by what it still holds (at
  /// once), from gzip by what already arrived (64 KiB to start). Returns
  /// whether `n` bytes were there.
  bool append(std::vector<std::uint8_t>& v, std::size_t n) {
    constexpr std::size_t first = std::size_t{1} << 16;
    while (v.size() < n) {
      const std::size_t at = v.size();
      const auto left = bound();  // (at least 1: a plain file's end is seen by reading)
      const std::size_t chunk = left ? static_cast<std::size_t>(std::clamp<std::uint64_t>(*left, 1, n - at))
                                     : std::min(n - at, std::max(first, at));
      v.resize(at + chunk);
      const std::size_t got = read(v.data() + at, chunk);
      v.resize(at + got);
      if (got == 0) return false;
    }
    return true;
  }

 private:
  /// Makes at least `k` raw bytes available (fewer at the end of the file); returns how many there are.
  std::size_t fill(std::size_t k) {
    if (avail_ >= k) return avail_;
    std::memmove(in_.data(), in_.data() + pos_, avail_);
    pos_ = 0;
    while (avail_ < k) {
      const std::size_t got = std::fread(in_.data() + avail_, 1, in_.size() - avail_, f_.get());
      if (got == 0) {
        if (std::ferror(f_.get())) fault(fmt::format("cannot be read: {}", std::strerror(errno)));
        break;
      }
      avail_ += got;
    }
    return avail_;
  }
  void take(std::size_t k) noexcept {
    pos_ += k;
    avail_ -= k;
    consumed_ += k;
  }

  std::size_t copy_into(unsigned char* into, std::size_t n) {
    std::size_t done = 0;
    while (done < n && fill(1) > 0) {
      const std::size_t k = std::min(n - done, avail_);
      std::memcpy(into + done, in_.data() + pos_, k);
      take(k);
      done += k;
    }
    return done;
  }

  std::size_t inflate_into(unsigned char* into, std::size_t n) {
    std::size_t done = 0;
    while (done < n && !ended_) {
      if (fill(1) == 0)
        fault("truncated: the gzip stream stops before its end (its CRC-32 and length trailer are missing)");
      z_->next_in = in_.data() + pos_;
      z_->avail_in = static_cast<uInt>(avail_);
      z_->next_out = into + done;
      z_->avail_out = static_cast<uInt>(std::min<std::size_t>(n - done, 1u << 30));
      const uInt out_before = z_->avail_out;
      const int r = inflate(z_.get(), Z_NO_FLUSH);
      take(avail_ - z_->avail_in);
      done += out_before - z_->avail_out;
      if (r == Z_STREAM_END) {
        next_member();
      } else if (r == Z_DATA_ERROR || r == Z_NEED_DICT) {
        fault(fmt::format("corrupt compressed data ({})", z_->msg ? z_->msg : "invalid gzip stream"));
      } else if (r == Z_MEM_ERROR) {
        fault("zlib ran out of memory");
      }
      // Z_OK and Z_BUF_ERROR: more input or more room needed; the loop provides either.
    }
    return done;
  }

  /// After a member whose trailer checked out: another member, the end, or garbage.
  void next_member() {
    if (fill(2) == 0) {
      ended_ = true;
      return;
    }
    if (avail_ >= 2 && in_[pos_] == 0x1f && in_[pos_ + 1] == 0x8b) {
      inflateReset(z_.get());
      return;
    }
    fault(fmt::format("{} bytes after the end of the gzip stream are not another gzip member",
                      size_ > consumed_ ? size_ - consumed_ : avail_));
  }

  [[noreturn]] void fault(const std::string& what) {
    fail_(what);
    throw std::runtime_error(what);  // (fail_ throws; this is never reached)
  }

  struct closer {
    void operator()(std::FILE* f) const noexcept { std::fclose(f); }
  };
  failure fail_;
  std::unique_ptr<std::FILE, closer> f_;
  std::uint64_t size_ = 0, consumed_ = 0;
  std::vector<unsigned char> in_ = std::vector<unsigned char>(std::size_t{1} << 16);
  std::size_t pos_ = 0, avail_ = 0;
  bool gzip_ = false, ended_ = false;
  std::unique_ptr<z_stream> z_;
};

/// Multiplies `extents`, or nothing when the product does not fit in 64 bits
/// (any zero extent makes it 0).
inline std::optional<std::uint64_t> checked_product(const std::vector<std::size_t>& extents) {
  if (std::find(extents.begin(), extents.end(), std::size_t{0}) != extents.end()) return 0;
  std::uint64_t p = 1;
  for (std::size_t e : extents)
    if (__builtin_mul_overflow(p, std::uint64_t{e}, &p)) return std::nullopt;
  return p;
}

}  // namespace kiln::detail
