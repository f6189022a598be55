// Files for reader tests: a fresh directory per test, bytes in and out, gzip
// in memory, and what a reader's error says.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace kiln::testing {

using bytes = std::vector<unsigned char>;

/// A directory of its own for each test, removed afterwards.
class file_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path write(const std::string& name, const bytes& b) const {
    const auto p = dir_ / name;
    std::ofstream(p, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p;
  }
  static bytes read(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::filesystem::path dir_;
};

/// `b` as one gzip member (zlib's deflate, default level).
inline bytes gzip(const bytes& b) {
  z_stream z{};
  deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  bytes out(deflateBound(&z, b.size()) + 32);
  z.next_in = const_cast<unsigned char*>(b.data());
  z.avail_in = static_cast<uInt>(b.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

/// An IDX file of unsigned bytes.
inline bytes idx_file(std::vector<std::uint32_t> extents, const bytes& payload, unsigned char type = 0x08) {
  bytes b{0, 0, type, static_cast<unsigned char>(extents.size())};
  for (auto e : extents)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(e >> s));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

/// The message of the exception `f` throws, checked to be an `Error` naming `file`.
template <class Error, class F>
std::string error_of(F&& f, const std::filesystem::path& file) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.file(), file);
    EXPECT_NE(std::string(e.what()).find(file.string() + ": "), std::string::npos) << e.what();
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another exception for " << file << ": " << e.what();
    return {};
  }
  ADD_FAILURE() << "no exception for " << file;
  return {};
}

}  // namespace kiln::testing
