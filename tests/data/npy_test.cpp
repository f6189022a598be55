// NumPy in: files written by real NumPy (tests/data/make_npy.py, run here),
// dtype, shape, byte order and Fortran order checked; hostile headers bounded.
#include <kiln/data/npy.hpp>
#include <kiln/data/npz.hpp>

#include <gtest/gtest.h>

#include "support/files.hpp"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#ifndef KILN_TESTS_DIR
#error "KILN_TESTS_DIR: the tests/ directory (for make_npy.py)"
#endif

namespace {
namespace fs = std::filesystem;
using kiln::data_error;
using kiln::testing::bytes;

class npy : public kiln::testing::file_test {
 protected:
  void SetUp() override {
    file_test::SetUp();
    const std::string cmd = "/usr/bin/python3 " KILN_TESTS_DIR "/data/make_npy.py " + dir_.string();
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "python3-numpy could not write the test files";
  }
  template <class F>
  static std::string error_of(F&& f, const fs::path& file) {
    return kiln::testing::error_of<data_error>(std::forward<F>(f), file);
  }
  static std::vector<float> x_values() {
    std::vector<float> v;
    for (int i = 0; i < 24; ++i) v.push_back(static_cast<float>(i) / 4 - 1);
    return v;
  }
  /// A .npy file of version 1.0 with `header` (padded) and `data`.
  fs::path handmade(const std::string& name, std::string header, const bytes& data) {
    while ((10 + header.size() + 1) % 64) header += ' ';
    header += '\n';
    bytes b{0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(header.size() & 0xff),
            static_cast<unsigned char>(header.size() >> 8)};
    b.insert(b.end(), header.begin(), header.end());
    b.insert(b.end(), data.begin(), data.end());
    return write(name, b);
  }
};

TEST_F(npy, float32_float64_uint8_big_endian_and_format_2) {
  const auto x = kiln::npy::read<float>(dir_ / "x_f4.npy");
  EXPECT_EQ(x.shape, (std::vector<std::size_t>{6, 2, 2}));
  EXPECT_EQ(x.values, x_values());
  EXPECT_EQ(kiln::npy::read<float>(dir_ / "x_be.npy").values, x_values());
  EXPECT_EQ(kiln::npy::read<float>(dir_ / "x_v2.npy").values, x_values());
  const auto d = kiln::npy::read<double>(dir_ / "x_f8.npy");
  EXPECT_EQ(d.values[5], 0.25);
  const auto u = kiln::npy::read<std::uint8_t>(dir_ / "x_u1.npy");
  EXPECT_EQ(u.shape, (std::vector<std::size_t>{3, 4}));
  EXPECT_EQ(u.values[11], 11);
  EXPECT_EQ(kiln::npy::read<std::int64_t>(dir_ / "y_i8.npy").values, (std::vector<std::int64_t>{0, 1, 2, 0, 1, 2}));
  const auto s = kiln::npy::read<float>(dir_ / "scalar.npy");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.values, std::vector<float>{3.5f});
}

TEST_F(npy, features_and_labels_as_a_dataset) {
  const kiln::dataset d = kiln::npy::load(dir_ / "x_f8.npy", dir_ / "y_i8.npy");
  EXPECT_EQ(d.name, "x_f8");
  EXPECT_EQ(d.sample_shape, (std::vector<std::size_t>{2, 2}));
  EXPECT_EQ(d.size(), 6u);
  EXPECT_EQ(d.features, x_values());
  EXPECT_EQ(d.labels, (std::vector<std::uint32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_TRUE(kiln::npy::load(dir_ / "x_u1.npy").labels.empty());
}

TEST_F(npy, a_dtype_other_than_asked_is_named) {
  const auto f = dir_ / "x_f8.npy";
  EXPECT_EQ(error_of([&] { kiln::npy::read<float>(f); }, f),
            "kiln: " + f.string() + ": holds float64 (dtype '<f8'), but float32 was asked for");
  const auto s = dir_ / "structured.npy";
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(s); }, s).find("a structured dtype"), std::string::npos);
  const auto y = dir_ / "y_f4.npy";
  EXPECT_NE(error_of([&] { kiln::npy::load(dir_ / "x_f4.npy", y); }, y)
                .find("labels must be integers, but the file holds float32 (dtype '<f4')"),
            std::string::npos);
}

TEST_F(npy, fortran_order_negative_labels_and_counts_that_differ_are_refused) {
  const auto f = dir_ / "x_fortran.npy";
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(f); }, f)
                .find("the array of shape (6, 4) is in Fortran order; kiln reads C order"),
            std::string::npos);
  const auto n = dir_ / "y_neg.npy";
  EXPECT_NE(error_of([&] { kiln::npy::load(dir_ / "x_f4.npy", n); }, n).find("label 2 is -1"), std::string::npos);
  const auto s = dir_ / "y_short.npy";
  EXPECT_NE(error_of([&] { kiln::npy::load(dir_ / "x_f4.npy", s); }, s)
                .find("labels of shape (5) do not go with 6 samples"),
            std::string::npos);
}

TEST_F(npy, damaged_and_hostile_files) {
  bytes good = read(dir_ / "x_f4.npy");
  bytes cut(good.begin(), good.end() - 1);
  const auto c = write("cut.npy", cut);
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(c); }, c).find("truncated: the shape (6, 2, 2) needs 96 data bytes"),
            std::string::npos);
  good.push_back(0);
  const auto l = write("long.npy", good);
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(l); }, l).find("bytes after the 96 data bytes"), std::string::npos);
  const auto z = write("x.npy.gz", kiln::testing::gzip(read(dir_ / "x_f4.npy")));
  EXPECT_EQ(kiln::npy::read<float>(z).values, x_values());
  // A header announcing 2^62 floats in a file of 128 bytes costs nothing.
  const auto huge = handmade("huge.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904,), }", {});
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(huge); }, huge).find("more elements than any file can hold"),
            std::string::npos);
  const auto big = handmade("big.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,), }", {});
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(big); }, big)
                .find("truncated: the shape (1000000000) needs 4000000000 data bytes but only 0 are there"),
            std::string::npos);
  const auto key = handmade("key.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", {0, 0, 0, 0});
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(key); }, key).find("the key 'x' is unknown"), std::string::npos);
  const auto half = handmade("half.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", {0, 0});
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(half); }, half).find("dtype '<f2' is not supported"),
            std::string::npos);
  const auto magic = write("magic.npy", bytes{'P', 'K', 3, 4, 0, 0, 0, 0, 0, 0});
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(magic); }, magic).find("not a .npy file"), std::string::npos);
  bytes long_header{0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0, 0, 0, 0, 0x40};  // 1 GiB of header announced
  const auto lh = write("long_header.npy", long_header);
  EXPECT_NE(error_of([&] { kiln::npy::read<float>(lh); }, lh).find("kiln reads headers of at most 65536"),
            std::string::npos);
}

TEST_F(npy, npz_stored_and_compressed) {
  for (const char* name : {"xy.npz", "xy_compressed.npz"}) {
    const auto f = dir_ / name;
    EXPECT_EQ(kiln::npz::names(f), (std::vector<std::string>{"x", "y"}));
    EXPECT_EQ(kiln::npz::read<float>(f, "x").values, x_values());
    const kiln::dataset d = kiln::npz::load(f);
    EXPECT_EQ(d.sample_shape, (std::vector<std::size_t>{2, 2}));
    EXPECT_EQ(d.labels, (std::vector<std::uint32_t>{0, 1, 2, 0, 1, 2}));
    EXPECT_EQ(error_of([&] { kiln::npz::read<float>(f, "z"); }, f),
              "kiln: " + f.string() + ": has no array 'z' (it has: x, y)");
    EXPECT_EQ(error_of([&] { kiln::npz::read<double>(f, "x"); }, f),
              "kiln: " + f.string() + ": array 'x': holds float32 (dtype '<f4'), but float64 was asked for");
  }
}

TEST_F(npy, a_damaged_npz_is_refused) {
  const auto not_zip = dir_ / "x_f4.npy";
  EXPECT_NE(error_of([&] { kiln::npz::names(not_zip); }, not_zip).find("not a zip archive"), std::string::npos);
  // One flipped byte in the stored x.npy data: the CRC-32 does not match.
  bytes b = read(dir_ / "xy.npz");
  const bytes x = read(dir_ / "x_f4.npy");
  const auto at = std::search(b.begin(), b.end(), x.end() - 8, x.end());
  ASSERT_NE(at, b.end());
  *at ^= 0x40;
  const auto f = write("flipped.npz", b);
  EXPECT_NE(error_of([&] { kiln::npz::read<float>(f, "x"); }, f).find("array 'x': its CRC-32 does not match"),
            std::string::npos);
}

}  // namespace
