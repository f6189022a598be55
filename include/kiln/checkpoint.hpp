// kiln/checkpoint.hpp — checkpoints that lose nothing.
//
// WHAT IT IS
//   A versioned binary file holding a program's parameters (a tied weight
//   once), its state values (batch_norm's running statistics), the optimizer's state, the epoch, step and seed of training, and
//   random-generator state, under a header that names the model, and closed
//   by a CRC-32 of everything before it (zlib's):
//
//     "KILNCKPT" · u32 format version · u32 bytes per scalar (4 or 8)
//     u64 signature length · the model's signature (Model::signature())
//     u64 parameter scalars · u64 state scalars (format 2 on) · u64 optimizer scalars
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
//
// GUARANTEES
//   * save writes a temporary file `.NAME.tmp-PID` in the same directory,
//     flushes and fsyncs it, then renames it over the target: an interrupted
//     save leaves the previous checkpoint whole. A symbolic link is written
//     through (its target replaced atomically; the link stays a link). A save
//     removes the temporaries killed saves left in its directory (process
//     gone from this machine, bytes beginning like a checkpoint).
//   * load reads and checks everything before it changes anything, the
//     CRC-32 first (every format ends with a CRC-32 of all before it), so
//     damage is named as damage: a file that is missing, not a checkpoint,
//     truncated, corrupted (checksum), of a newer format, of another model,
//     or intact but holding values training cannot use (out_of_range: a
//     NaN/inf/negative lr scale, non-finite parameters, ...) raises
//     kiln::checkpoint_error saying which, and the program and optimizer are
//     left untouched. It allocates the file's bytes and nothing more,
//     whatever lengths the file announces (fuzzed: docs/reliability.md).
//   * fit's rotation (remove_old_checkpoints) keeps the newest K
//     epoch-NNNN.kiln files of the directory by epoch number, whoever wrote
//     them, and the one just written.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

namespace kiln {

static_assert(std::endian::native == std::endian::little, "kiln checkpoints are written on little-endian machines");

/// What went wrong with a checkpoint file.
enum class checkpoint_fault {
  missing,
  not_a_checkpoint,
  newer_format,
  truncated,
  corrupted,
  other_model,
  io,
  out_of_range,  ///< intact (checksum good) but holds a value training cannot use: a NaN rate scale, ...
};

class checkpoint_error : public std::runtime_error {
 public:
  checkpoint_error(checkpoint_fault fault, const std::filesystem::path& file, const std::string& what)
      : std::runtime_error(fmt::format("kiln: checkpoint {}: {}", file.string(), what)), fault_(fault), file_(file) {}
  checkpoint_fault fault() const noexcept { return fault_; }
  const std::filesystem::path& file() const noexcept { return file_; }

 private:
  checkpoint_fault fault_;
  std::filesystem::path file_;
};

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
inline constexpr std::uint32_t checkpoint_format_version = 2;  // 2: the model's state values

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

class byte_reader {
 public:
  byte_reader(std::span<const unsigned char> b, const std::filesystem::path& f) : b_(b), file_(f) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string get_text() {
    const auto n = get<std::uint64_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(b_.data() + at_), static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return s;
  }
  void need(std::uint64_t n) const {
    if (n > b_.size() - at_) {
      throw checkpoint_error(checkpoint_fault::truncated, file_,
                             fmt::format("truncated: {} bytes where at least {} are needed", b_.size(), at_ + n));
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

/// Creates `dir` (and its parents) for checkpoints, or says why not.
inline void create_checkpoint_directory(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw checkpoint_error(checkpoint_fault::io, dir,
                           fmt::format("cannot create the checkpoint directory: {}",
                                       ec ? ec.message() : "a file of that name is in the way"));
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

/// The first line where two signatures differ, for messages.
inline std::string first_difference(const std::string& a, const std::string& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto line = [&](const std::string& s) {
    const auto start = s.rfind('\n', i == 0 ? 0 : i - 1);
    const auto from = (start == std::string::npos || i == 0) ? 0 : start + 1;
    const auto end = s.find('\n', from);
    return s.substr(from, end == std::string::npos ? std::string::npos : end - from);
  };
  return fmt::format("the file has \"{}\" where this model has \"{}\"", line(a), line(b));
}

}  // namespace detail

/// Writes `program`'s parameters, an optimizer's state and the training
/// position to `file`, atomically.
template <class Program, class OptimizerScalar = typename Program::scalar_type>
void save_checkpoint(const std::filesystem::path& file, const Program& program,
                     std::span<const OptimizerScalar> optimizer_state = {}, std::string_view optimizer_name = "",
                     const training_position& at = {}) {
  using T = typename Program::scalar_type;
  using Stored = std::conditional_t<std::is_same_v<T, double>, double, float>;
  using layout = typename Program::layout;
  detail::byte_writer w;
  w.append(checkpoint_magic.data(), checkpoint_magic.size());
  w.put<std::uint32_t>(checkpoint_format_version);
  w.put<std::uint32_t>(sizeof(Stored));
  w.put_text(Program::model_type::signature());
  using state_layout = typename Program::state_layout;
  w.put<std::uint64_t>(layout::count);
  w.put<std::uint64_t>(state_layout::count);
  w.put<std::uint64_t>(optimizer_state.size());
  w.put_text(optimizer_name);
  w.put(at.epoch);
  w.put(at.step);
  w.put(at.seed);
  for (auto r : at.rng) w.put(r);
  w.put(at.lr_scale);
  w.put(at.best_metric);
  w.put(at.stale_epochs);
  w.put(at.has_best);
  w.put(at.step_in_epoch);
  const auto params = program.parameters();
  for (std::size_t i = 0; i < layout::tensor_count; ++i)
    w.template put_scalars<Stored>(params.subspan(layout::offsets[i], layout::sizes[i]));
  const auto state = program.state();
  for (std::size_t i = 0; i < state_layout::tensor_count; ++i)
    w.template put_scalars<Stored>(state.subspan(state_layout::offsets[i], state_layout::sizes[i]));
  w.template put_scalars<Stored>(optimizer_state);
  w.put(detail::crc32_of(w.bytes()));
  detail::write_atomically(file, w.bytes());
}

namespace detail {

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
  byte_reader r{bytes.subspan(magic, n - magic - 4), file};
  checkpoint_contents c;
  c.version = r.get<std::uint32_t>();
  if (c.version > checkpoint_format_version)
    refuse(checkpoint_fault::newer_format,
           fmt::format("format version {} is newer than this kiln reads ({}); upgrade kiln", c.version,
                       checkpoint_format_version));
  if (c.version == 0) refuse(checkpoint_fault::corrupted, "corrupted: format version 0");
  c.scalar = r.get<std::uint32_t>();
  if (c.scalar != 4 && c.scalar != 8)
    refuse(checkpoint_fault::corrupted, fmt::format("corrupted: {} bytes per scalar", c.scalar));
  c.signature = r.get_text();
  c.n_params = r.get<std::uint64_t>();
  c.n_state = c.version >= 2 ? r.get<std::uint64_t>() : std::uint64_t{0};
  c.n_opt = r.get<std::uint64_t>();
  c.optimizer = r.get_text();
  auto& at = c.at;
  at.epoch = r.get<std::uint64_t>();
  at.step = r.get<std::uint64_t>();
  at.seed = r.get<std::uint64_t>();
  for (auto& x : at.rng) x = r.get<std::uint64_t>();
  at.lr_scale = r.get<double>();
  at.best_metric = r.get<double>();
  at.stale_epochs = r.get<std::uint64_t>();
  at.has_best = r.get<std::uint64_t>();
  at.step_in_epoch = r.get<std::uint64_t>();
  const std::size_t left = n - magic - 4 - r.at();
  const std::uint64_t limit = left / c.scalar;  // each count alone below it keeps the sum from overflowing
  if (c.n_params > limit || c.n_state > limit || c.n_opt > limit ||
      (c.n_params + c.n_state + c.n_opt) * c.scalar != left)
    refuse(checkpoint_fault::corrupted,
           fmt::format("corrupted: the header announces {} + {} + {} scalars of {} bytes, but {} bytes follow it",
                       c.n_params, c.n_state, c.n_opt, c.scalar, left));
  c.scalars = bytes.subspan(magic + r.at(), left);

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

/// Checks `bytes` (checkpoint `file`) whole and against `program`, then loads them; see load_checkpoint.
template <class Program, class OptimizerScalar>
training_position load_checkpoint_bytes(std::span<const unsigned char> bytes, const std::filesystem::path& file,
                                        Program& program, std::span<OptimizerScalar> optimizer_state,
                                        std::string_view optimizer_name) {
  using T = typename Program::scalar_type;
  using layout = typename Program::layout;
  using state_layout = typename Program::state_layout;
  const checkpoint_contents c = parse_checkpoint(bytes, file);
  const std::string mine = Program::model_type::signature();
  if (c.signature != mine)
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           "written for another model: " + first_difference(c.signature, mine));
  if (c.n_params != layout::count || c.n_state != state_layout::count)
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           fmt::format("holds {} parameters and {} state values; this model has {} and {}", c.n_params,
                                       c.n_state, layout::count, state_layout::count));
  if (!optimizer_state.empty() && (c.n_opt != optimizer_state.size() || c.optimizer != optimizer_name))
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           fmt::format("holds the state of optimizer '{}' ({} scalars); this trainer's is '{}' ({})",
                                       c.optimizer, c.n_opt, optimizer_name, optimizer_state.size()));
  const std::size_t used = static_cast<std::size_t>(c.n_params + c.n_state) + optimizer_state.size();
  if constexpr (std::is_same_v<T, float> && std::is_same_v<OptimizerScalar, float>) {
    if (c.scalar == 8)
      for (std::size_t i = 0; i < used; ++i)
        if (std::abs(c.scalar_at(i)) > std::numeric_limits<float>::max())
          throw checkpoint_error(checkpoint_fault::out_of_range, file,
                                 fmt::format("out of range: stored value {} is {}, beyond float", i, c.scalar_at(i)));
  }

  // Everything checked: now copy.
  std::size_t k = 0;
  auto params = program.parameters();
  for (std::size_t i = 0; i < layout::tensor_count; ++i)
    for (std::size_t j = 0; j < layout::sizes[i]; ++j)
      params[layout::offsets[i] + j] = static_cast<T>(c.scalar_at(k++));
  auto state = program.state();
  for (std::size_t i = 0; i < state_layout::tensor_count; ++i)
    for (std::size_t j = 0; j < state_layout::sizes[i]; ++j)
      state[state_layout::offsets[i] + j] = static_cast<T>(c.scalar_at(k++));
  for (auto& v : optimizer_state) v = static_cast<OptimizerScalar>(c.scalar_at(k++));
  return c.at;
}

}  // namespace detail

/// Reads `file` into `program` (and `optimizer_state`, which must have the
/// size that was saved, or be empty to skip it). Checks everything first;
/// on any fault throws kiln::checkpoint_error and changes nothing. Memory:
/// the file's bytes, nothing more, whatever its header announces.
template <class Program, class OptimizerScalar = typename Program::scalar_type>
training_position load_checkpoint(const std::filesystem::path& file, Program& program,
                                  std::span<OptimizerScalar> optimizer_state = {},
                                  std::string_view optimizer_name = "") {
  const auto bytes = detail::read_checkpoint_file(file);
  return detail::load_checkpoint_bytes(std::span<const unsigned char>(bytes), file, program, optimizer_state,
                                       optimizer_name);
}

/// The name fit gives the checkpoint of epoch `epoch`: epoch-0001.kiln, ...
inline std::string checkpoint_file_name(std::uint64_t epoch) { return fmt::format("epoch-{:04}.kiln", epoch); }

/// The epoch in a name checkpoint_file_name made (at least 4 digits), or nothing.
inline std::optional<std::uint64_t> checkpoint_epoch_of(std::string_view name) {
  constexpr std::string_view prefix = "epoch-", suffix = ".kiln";
  if (name.size() < prefix.size() + 4 + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
    return std::nullopt;
  const auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 19) return std::nullopt;
  std::uint64_t e = 0;
  for (char ch : digits) {
    if (ch < '0' || ch > '9') return std::nullopt;
    e = e * 10 + static_cast<std::uint64_t>(ch - '0');
  }
  return e;
}

/// Keeps the `keep` (at least 1) checkpoints of `dir` with the highest epoch
/// numbers in their names (checkpoint_file_name's pattern, whoever wrote
/// them), and `just_written` whatever its number, and removes the others:
/// a directory shared by runs stays bounded (keep + 1 files at most), and a
/// new run beside an old one's higher epochs still keeps its latest.
/// Other files are never touched.
inline void remove_old_checkpoints(const std::filesystem::path& dir, std::size_t keep,
                                   const std::filesystem::path& just_written = {}) {
  std::vector<std::pair<std::uint64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code entry;
    if (const auto e = checkpoint_epoch_of(it->path().filename().string()); e && !it->is_directory(entry))
      found.emplace_back(*e, it->path());
  }
  keep = std::max<std::size_t>(keep, 1);
  std::sort(found.begin(), found.end());
  for (std::size_t i = 0; i + keep < found.size(); ++i)
    if (found[i].second.filename() != just_written.filename()) std::filesystem::remove(found[i].second, ec);
}

}  // namespace kiln
