// kiln/checkpoint_format.hpp — a checkpoint's bytes: the layout, the
// training position it carries, and the checks that turn a file's bytes into
// its contents (against no model yet: kiln/checkpoint.hpp does that).
//
// THE LAYOUT (format 3)
//   A versioned binary file closed by a CRC-32 of everything before it (zlib's):
//
//     "KILNCKPT" · u32 format version · u32 bytes per scalar (4 or 8)
//     u64 signature length · the model's signature (Model::signature(): the
//       same text from every compiler; formats 1 and 2 held type names)
//     u64 parameter scalars · u64 state scalars · u64 optimizer scalars
//     u64 optimizer-name length · name
//     u64 epoch · u64 step · u64 seed · 4 × u64 rng state
//     f64 lr scale · f64 best metric · u64 stale epochs · u64 has best · u64 step in epoch
//     parameters · state (running statistics) · optimizer state · u32 CRC-32
//   (little-endian; parameters tensor after tensor in the model's order,
//   without the flat buffer's alignment padding.)
//
//   Parameters are stored in float for float programs (the f32 master
//   weights whatever the compute precision) and in double for double
//   programs; loading converts, so either loads into the other.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <fmt/format.h>
#include <zlib.h>

#include <kiln/checkpoint_error.hpp>

namespace kiln {

static_assert(std::endian::native == std::endian::little, "kiln checkpoints are written on little-endian machines");

/// Where training stood when the checkpoint was written.
struct training_position {
  std::uint64_t epoch = 0;  ///< epochs completed
  std::uint64_t step = 0;   ///< optimizer steps completed
  std::uint64_t seed = 0;   ///< the fit seed (shuffling derives from seed and epoch)
  std::array<std::uint64_t, 4> rng{};
  double lr_scale = 1.0;            ///< what reduce_on_plateau has made of the learning rate
  double best_metric = 0.0;         ///< the best monitored value so far (plateau / early stopping)
  std::uint64_t stale_epochs = 0;   ///< epochs since it improved
  std::uint64_t has_best = 0;       ///< whether best_metric holds a value
  std::uint64_t step_in_epoch = 0;  ///< steps done of an epoch stopped part-way
};

inline constexpr std::string_view checkpoint_magic = "KILNCKPT";
/// 2: the model's state values; 3: the model's signature is the same for
/// every compiler (files of formats 1 and 2 are refused: older_format).
inline constexpr std::uint32_t checkpoint_format_version = 3;

namespace detail {

class byte_writer {
 public:
  void append(const void* p, std::size_t n) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + n);
    if (n) std::memcpy(bytes_.data() + at, p, n);
  }
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void put(const T& v) { append(&v, sizeof(T)); }
  void put_text(std::string_view s) {
    put<std::uint64_t>(s.size());
    append(s.data(), s.size());
  }
  template <class Stored, class T>
  void put_scalars(std::span<const T> v) {
    for (T x : v) put(static_cast<Stored>(x));
  }
  std::vector<unsigned char>& bytes() { return bytes_; }

 private:
  std::vector<unsigned char> bytes_;
};

/// Reads the fields of a checkpoint whose checksum matched, in order, from
/// byte `at` of `b` (the contents: all before the checksum). The file is as
/// its writer wrote it, so a field running past the end is a damaged
/// writer's doing, not a cut: `corrupted`, naming the field.
class byte_reader {
 public:
  byte_reader(std::span<const unsigned char> b, std::size_t at, const std::filesystem::path& f)
      : b_(b), at_(at), file_(f) {}
  template <class T>
  T get(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string get_text(std::string_view what) {
    const auto n = get<std::uint64_t>(fmt::format("the length of {}", what));
    need(n, what);
    std::string s(reinterpret_cast<const char*>(b_.data() + at_), static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return s;
  }
  void need(std::uint64_t n, std::string_view what) const {
    if (n > b_.size() - at_) {
      throw checkpoint_error(
          checkpoint_fault::corrupted, file_,
          fmt::format("corrupted: {} ({} bytes from byte {}) runs past the end of the contents (byte {}), though "
                      "the checksum matches",
                      what, n, at_, b_.size()));
    }
  }
  std::size_t at() const { return at_; }

 private:
  std::span<const unsigned char> b_;
  std::size_t at_ = 0;
  std::filesystem::path file_;
};

inline std::uint32_t crc32_of(std::span<const unsigned char> b) {
  uLong c = crc32(0L, Z_NULL, 0);
  std::size_t at = 0;
  while (at < b.size()) {
    const auto n = static_cast<uInt>(std::min<std::size_t>(b.size() - at, 1u << 30));
    c = crc32(c, b.data() + at, n);
    at += n;
  }
  return static_cast<std::uint32_t>(c);
}

/// A checkpoint file's contents, checked for integrity and range but not yet
/// against a model.
struct checkpoint_contents {
  std::uint32_t version = 0;
  std::uint32_t scalar = 0;  ///< bytes per stored scalar, 4 or 8
  std::string signature, optimizer;
  std::uint64_t n_params = 0, n_state = 0, n_opt = 0;
  training_position at;
  std::span<const unsigned char> scalars;  ///< parameters, state, optimizer state

  double scalar_at(std::size_t i) const noexcept {
    if (scalar == 4) {
      float f;
      std::memcpy(&f, scalars.data() + i * 4, 4);
      return f;
    }
    double d;
    std::memcpy(&d, scalars.data() + i * 8, 8);
    return d;
  }
};

/// The fixed-size fields between the optimizer name and the scalars.
inline constexpr std::size_t checkpoint_position_bytes = 3 * 8 + 4 * 8 + 2 * 8 + 3 * 8;

/// What the header says the file's size is, read leniently (for telling a
/// cut file from a damaged one when the checksum fails); nothing if even the
/// header is cut off.
inline std::optional<std::uint64_t> announced_checkpoint_size(std::span<const unsigned char> b) {
  std::uint64_t at = checkpoint_magic.size();
  auto u64 = [&](std::uint64_t& v) {
    if (at > b.size() || b.size() - at < 8) return false;
    std::memcpy(&v, b.data() + at, 8);
    at += 8;
    return true;
  };
  std::uint32_t version = 0, scalar = 0;
  if (b.size() < at + 8) return std::nullopt;
  std::memcpy(&version, b.data() + at, 4);
  std::memcpy(&scalar, b.data() + at + 4, 4);
  at += 8;
  std::uint64_t length = 0, n_params = 0, n_state = 0, n_opt = 0;
  if (!u64(length) || length > b.size()) return std::nullopt;
  at += length;
  if (!u64(n_params) || (version != 1 && !u64(n_state)) || !u64(n_opt) || !u64(length) || length > b.size())
    return std::nullopt;
  at += length + checkpoint_position_bytes + 4;
  std::uint64_t payload = 0;
  if (__builtin_add_overflow(n_params, n_state, &payload) || __builtin_add_overflow(payload, n_opt, &payload) ||
      __builtin_mul_overflow(payload, std::uint64_t{scalar == 8 ? 8u : 4u}, &payload) ||
      __builtin_add_overflow(at, payload, &at))
    return std::numeric_limits<std::uint64_t>::max();
  return at;
}

/// Checks `bytes`, the whole of checkpoint `file`, in this order: magic,
/// checksum (so damage is reported as damage, whatever it hit), format
/// version, lengths (each against the bytes that are there, before anything
/// is allocated), then the range of every value. Throws kiln::checkpoint_error.
inline checkpoint_contents parse_checkpoint(std::span<const unsigned char> bytes, const std::filesystem::path& file) {
  auto refuse = [&](checkpoint_fault fault, const std::string& what) { throw checkpoint_error(fault, file, what); };
  const std::size_t n = bytes.size();
  const std::size_t magic = checkpoint_magic.size();
  if (n > 0 && std::memcmp(bytes.data(), checkpoint_magic.data(), std::min(n, magic)) != 0)
    refuse(checkpoint_fault::not_a_checkpoint, "not a kiln checkpoint (wrong magic number)");
  constexpr std::size_t smallest = 8 + 8 + 8 + 8 + 8 + 8 + checkpoint_position_bytes + 4;  // format 1, empty texts
  if (n < smallest)
    refuse(checkpoint_fault::truncated,
           fmt::format("truncated: {} bytes, fewer than any checkpoint's {}", n, smallest));
  std::uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + n - 4, 4);
  if (crc32_of(bytes.first(n - 4)) != stored_crc) {
    const auto announced = announced_checkpoint_size(bytes);
    if (!announced)
      refuse(checkpoint_fault::truncated,
             fmt::format("truncated: {} bytes end inside the header (and the checksum does not match)", n));
    if (*announced > n)
      refuse(checkpoint_fault::truncated,
             fmt::format("truncated: {} bytes, but its header announces {} (and the checksum does not match)", n,
                         *announced));
    refuse(checkpoint_fault::corrupted, "corrupted: the checksum does not match the contents");
  }

  // Intact from here on: what the file says is what its writer wrote.
  byte_reader r{bytes.first(n - 4), magic, file};
  checkpoint_contents c;
  c.version = r.get<std::uint32_t>("the format version");
  if (c.version > checkpoint_format_version)
    refuse(checkpoint_fault::newer_format,
           fmt::format("format version {} is newer than this kiln reads ({}); upgrade kiln", c.version,
                       checkpoint_format_version));
  if (c.version == 0) refuse(checkpoint_fault::corrupted, "corrupted: format version 0");
  if (c.version < checkpoint_format_version)
    refuse(checkpoint_fault::older_format,
           fmt::format("format version {} was written by an earlier kiln, whose model signature held type names as "
                       "the compiler spells them; this kiln reads format {}, whose signature every compiler spells "
                       "alike, and cannot check the file against the model",
                       c.version, checkpoint_format_version));
  c.scalar = r.get<std::uint32_t>("the bytes per scalar");
  if (c.scalar != 4 && c.scalar != 8)
    refuse(checkpoint_fault::corrupted, fmt::format("corrupted: {} bytes per scalar", c.scalar));
  c.signature = r.get_text("the model signature");
  c.n_params = r.get<std::uint64_t>("the parameter count");
  c.n_state = r.get<std::uint64_t>("the state count");
  c.n_opt = r.get<std::uint64_t>("the optimizer-state count");
  c.optimizer = r.get_text("the optimizer name");
  auto& at = c.at;
  r.need(checkpoint_position_bytes, "the training position");
  at.epoch = r.get<std::uint64_t>("the epoch");
  at.step = r.get<std::uint64_t>("the step");
  at.seed = r.get<std::uint64_t>("the seed");
  for (auto& x : at.rng) x = r.get<std::uint64_t>("the random-generator state");
  at.lr_scale = r.get<double>("the learning-rate scale");
  at.best_metric = r.get<double>("the best metric");
  at.stale_epochs = r.get<std::uint64_t>("the stale epochs");
  at.has_best = r.get<std::uint64_t>("has_best");
  at.step_in_epoch = r.get<std::uint64_t>("the step in the epoch");
  const std::size_t left = n - 4 - r.at();
  const std::uint64_t limit = left / c.scalar;  // each count alone below it keeps the sum from overflowing
  if (c.n_params > limit || c.n_state > limit || c.n_opt > limit ||
      (c.n_params + c.n_state + c.n_opt) * c.scalar != left)
    refuse(checkpoint_fault::corrupted,
           fmt::format("corrupted: the header announces {} + {} + {} scalars of {} bytes, but {} bytes follow it",
                       c.n_params, c.n_state, c.n_opt, c.scalar, left));
  c.scalars = bytes.subspan(r.at(), left);

  auto out_of_range = [&](std::string_view field, const auto& value, std::string_view rule) {
    refuse(checkpoint_fault::out_of_range, fmt::format("out of range: {} is {}; {}", field, value, rule));
  };
  if (!std::isfinite(at.lr_scale) || at.lr_scale < 0)
    out_of_range("the learning-rate scale (lr_scale)", at.lr_scale, "it must be finite and >= 0");
  if (at.has_best > 1) out_of_range("has_best", at.has_best, "it must be 0 or 1");
  if (std::isnan(at.best_metric)) out_of_range("the best metric (best_metric)", at.best_metric, "it must be a number");
  if (at.stale_epochs > at.epoch)
    out_of_range("stale_epochs", at.stale_epochs, fmt::format("it cannot exceed the epochs done ({})", at.epoch));
  if (at.step_in_epoch > at.step)
    out_of_range("step_in_epoch", at.step_in_epoch, fmt::format("it cannot exceed the steps done ({})", at.step));
  const std::size_t total = static_cast<std::size_t>(c.n_params + c.n_state + c.n_opt);
  for (std::size_t i = 0; i < total; ++i) {
    if (const double v = c.scalar_at(i); !std::isfinite(v)) {
      const bool param = i < c.n_params, state = !param && i < c.n_params + c.n_state;
      out_of_range(fmt::format("{} value {}",
                               param   ? "parameter"
                               : state ? "state"
                                       : "optimizer state",
                               i - (param   ? 0
                                    : state ? c.n_params
                                            : c.n_params + c.n_state)),
                   v, "every stored value must be finite");
    }
  }
  return c;
}

}  // namespace detail

}  // namespace kiln
