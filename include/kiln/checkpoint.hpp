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
//   * save writes a temporary file in the same directory, flushes and fsyncs
//     it, then renames it over the target: an interrupted save leaves the
//     previous checkpoint whole.
//   * load reads and checks everything before it changes anything: a file
//     that is missing, not a checkpoint, of a newer format, truncated,
//     corrupted (checksum), or of another model, raises kiln::checkpoint_error
//     saying which, and the program and optimizer are left untouched.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

namespace kiln {

static_assert(std::endian::native == std::endian::little, "kiln checkpoints are written on little-endian machines");

/// What went wrong with a checkpoint file.
enum class checkpoint_fault { missing, not_a_checkpoint, newer_format, truncated, corrupted, other_model, io };

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

/// Writes `bytes` to `file` atomically: temporary file, fsync, rename, fsync of the directory.
inline void write_atomically(const std::filesystem::path& file, std::span<const unsigned char> bytes) {
  const auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  const auto tmp = dir / fmt::format(".{}.tmp-{}", file.filename().string(), ::getpid());
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
  if (std::rename(tmp.c_str(), file.c_str()) != 0) fail("cannot move into place");
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

/// Reads `file` into `program` (and `optimizer_state`, which must have the
/// size that was saved, or be empty to skip it). Checks everything first;
/// on any fault throws kiln::checkpoint_error and changes nothing.
template <class Program, class OptimizerScalar = typename Program::scalar_type>
training_position load_checkpoint(const std::filesystem::path& file, Program& program,
                                  std::span<OptimizerScalar> optimizer_state = {},
                                  std::string_view optimizer_name = "") {
  using T = typename Program::scalar_type;
  using layout = typename Program::layout;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw checkpoint_error(checkpoint_fault::missing, file, "no such file");
  std::ifstream in(file, std::ios::binary);
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.eof() && in.fail()) throw checkpoint_error(checkpoint_fault::io, file, "cannot be read");

  if (bytes.size() < checkpoint_magic.size() ||
      std::memcmp(bytes.data(), checkpoint_magic.data(), checkpoint_magic.size()) != 0)
    throw checkpoint_error(checkpoint_fault::not_a_checkpoint, file, "not a kiln checkpoint (wrong magic number)");
  detail::byte_reader r{std::span<const unsigned char>(bytes).subspan(checkpoint_magic.size()), file};
  const auto version = r.get<std::uint32_t>();
  if (version > checkpoint_format_version)
    throw checkpoint_error(checkpoint_fault::newer_format, file,
                           fmt::format("format version {} is newer than this kiln reads ({}); upgrade kiln", version,
                                       checkpoint_format_version));
  if (version == 0) throw checkpoint_error(checkpoint_fault::corrupted, file, "corrupted: format version 0");
  const auto scalar = r.get<std::uint32_t>();
  if (scalar != 4 && scalar != 8)
    throw checkpoint_error(checkpoint_fault::corrupted, file, fmt::format("corrupted: {} bytes per scalar", scalar));
  const std::string signature = r.get_text();
  const auto n_params = r.get<std::uint64_t>();
  const auto n_state = version >= 2 ? r.get<std::uint64_t>() : std::uint64_t{0};
  const auto n_opt = r.get<std::uint64_t>();
  const std::string opt_name = r.get_text();
  training_position at;
  at.epoch = r.get<std::uint64_t>();
  at.step = r.get<std::uint64_t>();
  at.seed = r.get<std::uint64_t>();
  for (auto& x : at.rng) x = r.get<std::uint64_t>();
  at.lr_scale = r.get<double>();
  at.best_metric = r.get<double>();
  at.stale_epochs = r.get<std::uint64_t>();
  at.has_best = r.get<std::uint64_t>();
  at.step_in_epoch = r.get<std::uint64_t>();
  const std::size_t header = checkpoint_magic.size() + r.at();
  if (n_params > bytes.size() || n_state > bytes.size() ||
      n_opt > bytes.size())  // (keeps the sums below from overflowing)
    throw checkpoint_error(checkpoint_fault::truncated, file,
                           fmt::format("truncated: {} bytes, but its header announces {} + {} + {} scalars",
                                       bytes.size(), n_params, n_state, n_opt));
  const std::size_t expected = header + static_cast<std::size_t>(n_params + n_state + n_opt) * scalar + 4;
  if (expected > bytes.size())
    throw checkpoint_error(checkpoint_fault::truncated, file,
                           fmt::format("truncated: {} bytes, but its header announces {}", bytes.size(), expected));
  if (expected < bytes.size())
    throw checkpoint_error(checkpoint_fault::corrupted, file,
                           fmt::format("corrupted: {} bytes after the announced end", bytes.size() - expected));
  std::uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  if (detail::crc32_of(std::span(bytes).first(bytes.size() - 4)) != stored_crc)
    throw checkpoint_error(checkpoint_fault::corrupted, file, "corrupted: the checksum does not match the contents");
  const std::string mine = Program::model_type::signature();
  if (signature != mine)
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           "written for another model: " + detail::first_difference(signature, mine));
  using state_layout = typename Program::state_layout;
  if (n_params != layout::count || n_state != state_layout::count)
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           fmt::format("holds {} parameters and {} state values; this model has {} and {}", n_params,
                                       n_state, layout::count, state_layout::count));
  if (!optimizer_state.empty() && (n_opt != optimizer_state.size() || opt_name != optimizer_name))
    throw checkpoint_error(checkpoint_fault::other_model, file,
                           fmt::format("holds the state of optimizer '{}' ({} scalars); this trainer's is '{}' ({})",
                                       opt_name, n_opt, optimizer_name, optimizer_state.size()));

  // Everything checked: now copy.
  const unsigned char* p = bytes.data() + header;
  auto read_scalar = [&]() -> double {
    double v;
    if (scalar == 4) {
      float f;
      std::memcpy(&f, p, 4);
      v = f;
    } else {
      std::memcpy(&v, p, 8);
    }
    p += scalar;
    return v;
  };
  auto params = program.parameters();
  for (std::size_t i = 0; i < layout::tensor_count; ++i)
    for (std::size_t k = 0; k < layout::sizes[i]; ++k) params[layout::offsets[i] + k] = static_cast<T>(read_scalar());
  auto state = program.state();
  for (std::size_t i = 0; i < state_layout::tensor_count; ++i)
    for (std::size_t k = 0; k < state_layout::sizes[i]; ++k)
      state[state_layout::offsets[i] + k] = static_cast<T>(read_scalar());
  if (!optimizer_state.empty())
    for (auto& v : optimizer_state) v = static_cast<OptimizerScalar>(read_scalar());
  return at;
}

}  // namespace kiln
