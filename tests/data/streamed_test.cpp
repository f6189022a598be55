// A dataset larger than memory: rows read from disk as the trainer asks,
// equal to what the whole-file readers give, and a file larger than the
// process's address-space limit iterated and trained on in a child process.
#include <kiln/data/idx.hpp>
#include <kiln/data/npy.hpp>
#include <kiln/data/streamed.hpp>
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include "support/files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#ifndef KILN_TESTS_DIR
#error "KILN_TESTS_DIR: the tests/ directory (for make_npy.py)"
#endif

namespace {
namespace fs = std::filesystem;
using namespace kiln;
using kiln::testing::bytes;

class streamed : public kiln::testing::file_test {
 protected:
  void make_numpy_files() {
    const std::string cmd = "/usr/bin/python3 " KILN_TESTS_DIR "/data/make_npy.py " + dir_.string();
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "python3-numpy could not write the test files";
  }
  /// A version-1.0 .npy header for uint8 data of `shape`, padded to 64 bytes.
  static bytes npy_header(const std::string& shape) {
    std::string h = "{'descr': '|u1', 'fortran_order': False, 'shape': (" + shape + "), }";
    while ((10 + h.size() + 1) % 64) h += ' ';
    h += '\n';
    const unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(h.size()), 0};
    bytes b(10 + h.size());
    std::copy(preamble, preamble + 10, b.begin());
    std::copy(h.begin(), h.end(), b.begin() + 10);
    return b;
  }
};

std::vector<float> rows(const auto& src) {
  const source_info info = src.info();
  std::size_t s = 1;
  for (auto e : info.sample_shape) s *= e;
  std::vector<float> all(info.samples * s);
  for (std::size_t i = info.samples; i-- > 0;)  // any order
    src.read_features(i, {}, std::span<float>(all).subspan(i * s, s));
  return all;
}

TEST_F(streamed, npy_rows_equal_the_whole_file_reader) {
  make_numpy_files();
  for (const char* f : {"x_f4.npy", "x_be.npy"}) {
    const auto s = streamed_dataset::npy(dir_ / f, {0, 1, 2, 0, 1, 2});
    EXPECT_EQ(s.size(), 6u);
    EXPECT_EQ(std::vector<std::size_t>(s.info().sample_shape.begin(), s.info().sample_shape.end()),
              (std::vector<std::size_t>{2, 2}));
    EXPECT_EQ(rows(s), npy::load(dir_ / "x_f4.npy").features) << f;
  }
  const auto u = streamed_dataset::npy(dir_ / "x_u1.npy", {}, 0.5f);
  std::vector<float> half = npy::load(dir_ / "x_u1.npy").features;
  for (float& v : half) v *= 0.5f;
  EXPECT_EQ(rows(u), half);
  EXPECT_EQ(npy::read_labels(dir_ / "y_i8.npy"), (std::vector<std::uint32_t>{0, 1, 2, 0, 1, 2}));
}

TEST_F(streamed, idx_rows_equal_the_whole_file_reader) {
  bytes payload(3 * 5 * 4);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<unsigned char>(i * 7);
  const auto f = write("images.idx", kiln::testing::idx_file({3, 5, 4}, payload));
  const auto s = streamed_dataset::idx(f, {1, 2, 3});
  const auto whole = idx::read(f);
  EXPECT_EQ(rows(s), std::vector<float>(whole.data.begin(), whole.data.end()));
  EXPECT_EQ(s.info().labels_per_sample, 1u);
}

TEST_F(streamed, files_it_cannot_stream_are_refused_when_opened) {
  make_numpy_files();
  auto message = [](auto&& f, const fs::path& file) { return kiln::testing::error_of<data_error>(f, file); };
  const auto f8 = dir_ / "x_f8.npy";
  EXPECT_NE(message([&] { streamed_dataset::npy(f8); }, f8).find("holds float64 (dtype '<f8'); a streamed dataset reads float32 or uint8"),
            std::string::npos);
  const auto gz = write("x.npy.gz", kiln::testing::gzip(read(dir_ / "x_f4.npy")));
  EXPECT_NE(message([&] { streamed_dataset::npy(gz); }, gz).find("gzip-compressed, which cannot be read at an offset"),
            std::string::npos);
  bytes cut = read(dir_ / "x_f4.npy");
  cut.pop_back();
  const auto c = write("cut.npy", cut);
  EXPECT_NE(message([&] { streamed_dataset::npy(c); }, c).find("(truncated)"), std::string::npos);
  const auto x = dir_ / "x_f4.npy";
  EXPECT_NE(message([&] { streamed_dataset::npy(x, {0, 1}); }, x).find("2 labels given for its 6 samples"),
            std::string::npos);
  const auto fo = dir_ / "x_fortran.npy";
  EXPECT_NE(message([&] { streamed_dataset::npy(fo); }, fo).find("Fortran order"), std::string::npos);
}

/// VmSize of this process, in bytes.
std::uint64_t address_space() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  return 0;
}

TEST_F(streamed, a_file_larger_than_the_address_space_limit_is_iterated_and_trained_on) {
  // The file: (n, 32, 32) uint8, sparse (it takes no disk), 384 MiB larger
  // than this process's address space and 128 MiB larger than the limit
  // set below; three rows hold known bytes.
  const std::uint64_t vm = address_space();
  ASSERT_GT(vm, 0u);
  const std::uint64_t limit = vm + (std::uint64_t{256} << 20);
  const std::size_t n = static_cast<std::size_t>((vm + (std::uint64_t{384} << 20)) / 1024);
  const bytes header = npy_header(std::to_string(n) + ", 32, 32");
  const auto file = write("big.npy", header);
  const std::uint64_t file_size = header.size() + std::uint64_t{n} * 1024;
  ASSERT_GT(file_size, limit);
  {
    const int fd = ::open(file.c_str(), O_WRONLY);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(file_size)), 0);
    const std::size_t marked[3] = {0, n / 2, n - 1};
    for (std::size_t k = 0; k < 3; ++k) {
      const bytes row(1024, static_cast<unsigned char>(k + 1));
      ASSERT_EQ(::pwrite(fd, row.data(), row.size(), static_cast<off_t>(header.size() + marked[k] * 1024)), 1024);
    }
    ::close(fd);
  }
  std::vector<std::uint32_t> labels(n);
  for (std::size_t i = 0; i < n; ++i) labels[i] = static_cast<std::uint32_t>(i % 2);

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int code = 0;
    try {
      const rlimit r{limit, limit};
      if (::setrlimit(RLIMIT_AS, &r) != 0) ::_exit(10);
      // The whole file cannot even be mapped under this limit.
      const int fd = ::open(file.c_str(), O_RDONLY);
      void* m = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (m != MAP_FAILED) ::_exit(11);
      ::close(fd);
      const auto data = streamed_dataset::npy(file, std::move(labels), 1.f);
      if (data.size() != n) ::_exit(12);
      // Every row, in order: the marked rows sum to 1024 × (1 + 2 + 3).
      double sum = 0;
      std::vector<float> row(1024);
      for (std::size_t i = 0; i < n; ++i) {
        data.read_features(i, {}, row);
        for (float v : row) sum += v;
      }
      if (sum != 1024.0 * 6) ::_exit(13);
      // And training reads it batch by batch (40 steps of a shuffled epoch).
      using net = model<input<32, 32>, flatten, dense<2>>;
      auto p = compile<net, batch<16>>(1);
      trainer t{p, sgd{.lr = 0.01f}};
      const auto h = t.fit(data, epochs{1},
                           {.progress = progress_mode::none, .on_step_end = [&](const step_report& s) {
                              if (s.step >= 40) t.stop();
                            }});
      if (t.steps_done() != 40 || !h.epochs.empty()) code = 14;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      code = 20;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: setrlimit, 11: the file could be mapped, 12: size, 13: sum, 14: steps, "
                                       "20: an exception";
}

}  // namespace
