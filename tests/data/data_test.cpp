// IDX reading and the Fashion-MNIST loader: every fault named, with its file.
#include <kiln/data/dataset.hpp>
#include <kiln/data/fashion_mnist.hpp>
#include <kiln/data/idx.hpp>
#include <kiln/data/text.hpp>

#include <gtest/gtest.h>
#include <zlib.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;
using kiln::data_error;

class data : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_data_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::vector<unsigned char> idx(unsigned char type, std::vector<std::uint32_t> extents,
                                        const std::vector<unsigned char>& payload) {
    std::vector<unsigned char> b{0, 0, type, static_cast<unsigned char>(extents.size())};
    for (auto e : extents)
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(e >> s));
    b.insert(b.end(), payload.begin(), payload.end());
    return b;
  }
  fs::path write(const std::string& name, const std::vector<unsigned char>& bytes, bool gzip = false) {
    const fs::path p = dir_ / name;
    if (gzip) {
      gzFile f = gzopen(p.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(p, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    }
    return p;
  }
  /// The message of the data_error `f` throws (and that it names `file`).
  template <class F>
  static std::string error_of(F&& f, const fs::path& file) {
    try {
      f();
    } catch (const data_error& e) {
      EXPECT_EQ(e.file(), file);
      EXPECT_EQ(std::string(e.what()).rfind("kiln: " + file.string() + ": ", 0), 0u) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no kiln::data_error for " << file;
    return {};
  }
  static std::vector<unsigned char> pixels(std::size_t n) {
    std::vector<unsigned char> p(n * 28 * 28);
    for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<unsigned char>(i * 7);
    return p;
  }
  fs::path dir_;
};

TEST_F(data, reads_plain_and_gzip_idx) {
  const auto bytes = idx(0x08, {2, 3}, {1, 2, 3, 4, 5, 6});
  for (bool gz : {false, true}) {
    const auto a = kiln::idx::read(write(gz ? "a.gz" : "a", bytes, gz));
    EXPECT_EQ(a.extents, (std::vector<std::size_t>{2, 3}));
    EXPECT_EQ(a.data, (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));
  }
}

TEST_F(data, missing_file) {
  const auto p = dir_ / "nope.gz";
  EXPECT_NE(error_of([&] { kiln::idx::read(p); }, p).find("no such file"), std::string::npos);
}

TEST_F(data, wrong_magic_number) {
  const auto p = write("bad", {'P', 'K', 3, 4, 0, 0, 0, 0});
  EXPECT_NE(error_of([&] { kiln::idx::read(p); }, p).find("wrong magic number 0x504b0304"), std::string::npos);
}

TEST_F(data, unsupported_element_type) {
  const auto p = write("float", idx(0x0D, {1}, {0, 0, 0, 0}));
  EXPECT_NE(error_of([&] { kiln::idx::read(p); }, p).find("element type 0x0d is not supported"), std::string::npos);
}

TEST_F(data, truncated_header_and_data) {
  auto header = idx(0x08, {10, 10}, {});
  header.resize(9);
  const auto p1 = write("short_header", header);
  EXPECT_NE(error_of([&] { kiln::idx::read(p1); }, p1).find("truncated: the header"), std::string::npos);
  const auto p2 = write("short_data.gz", idx(0x08, {10, 10}, std::vector<unsigned char>(99)), true);
  EXPECT_NE(error_of([&] { kiln::idx::read(p2); }, p2).find("truncated: the data needs 100 bytes but only 99"),
            std::string::npos);
}

TEST_F(data, trailing_bytes) {
  const auto p = write("long", idx(0x08, {2}, {1, 2, 3}));
  EXPECT_NE(error_of([&] { kiln::idx::read(p); }, p).find("unexpected bytes after the 2 bytes"), std::string::npos);
}

TEST_F(data, corrupt_gzip_stream) {
  const auto good = write("c.gz", idx(0x08, {4096}, std::vector<unsigned char>(4096, 9)), true);
  std::vector<char> bytes(fs::file_size(good));
  std::ifstream(good, std::ios::binary).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  for (std::size_t i = 12; i < bytes.size() - 8; ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5A);
  const auto p = dir_ / "corrupt.gz";
  std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const std::string m = error_of([&] { kiln::idx::read(p); }, p);
  EXPECT_TRUE(m.find("corrupt compressed data") != std::string::npos || m.find("truncated") != std::string::npos ||
              m.find("wrong magic") != std::string::npos)
      << m;
}

TEST_F(data, fashion_mnist_checks_dimensions_counts_and_labels) {
  const auto images = write("img", idx(0x08, {3, 28, 28}, pixels(3)));
  const auto labels = write("lab", idx(0x08, {3}, {0, 9, 4}));
  const kiln::dataset d = kiln::fashion_mnist::load_files(images, labels);
  EXPECT_EQ(d.size(), 3u);
  EXPECT_EQ(d.sample_shape, (std::vector<std::size_t>{28, 28}));
  EXPECT_EQ(d.labels, (std::vector<std::uint32_t>{0, 9, 4}));
  EXPECT_FLOAT_EQ(d.features[1], 7.0f / 255);

  const auto flat = write("flat", idx(0x08, {3, 784}, pixels(3)));
  EXPECT_NE(error_of([&] { kiln::fashion_mnist::load_files(flat, labels); }, flat)
                .find("wrong dimensions: expected (count, 28, 28), found (3, 784)"),
            std::string::npos);
  const auto two = write("two", idx(0x08, {2}, {0, 1}));
  EXPECT_NE(error_of([&] { kiln::fashion_mnist::load_files(images, two); }, two).find("2 labels, but img has 3 images"),
            std::string::npos);
  const auto square = write("square", idx(0x08, {3, 1}, {0, 1, 2}));
  EXPECT_NE(error_of([&] { kiln::fashion_mnist::load_files(images, square); }, square)
                .find("wrong dimensions: expected (count), found (3, 1)"),
            std::string::npos);
  const auto big = write("big", idx(0x08, {3}, {0, 10, 1}));
  EXPECT_NE(
      error_of([&] { kiln::fashion_mnist::load_files(images, big); }, big).find("label 10 of sample 1 is out of range"),
      std::string::npos);
}

TEST_F(data, fashion_mnist_loads_a_directory_normalizes_and_shuffles) {
  write("train-images-idx3-ubyte.gz", idx(0x08, {4, 28, 28}, pixels(4)), true);
  write("train-labels-idx1-ubyte.gz", idx(0x08, {4}, {0, 1, 2, 3}), true);
  write("t10k-images-idx3-ubyte", idx(0x08, {2, 28, 28}, pixels(2)));  // plain works too
  write("t10k-labels-idx1-ubyte", idx(0x08, {2}, {5, 6}));
  const auto f = kiln::fashion_mnist::load(dir_);
  EXPECT_EQ(f.train.size(), 4u);
  EXPECT_EQ(f.test.labels, (std::vector<std::uint32_t>{5, 6}));
  const auto s = kiln::fashion_mnist::load(dir_, {.normalize = kiln::pixel_normalization::standardize});
  EXPECT_FLOAT_EQ(s.train.features[0], (0.0f - 0.2860f) / 0.3530f);
  const auto a = kiln::fashion_mnist::load(dir_, {.shuffle_seed = 3});
  const auto b = kiln::fashion_mnist::load(dir_, {.shuffle_seed = 3});
  EXPECT_EQ(a.train.labels, b.train.labels);
  EXPECT_EQ(a.train.features, b.train.features);
  auto sorted = a.train.labels;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::uint32_t>{0, 1, 2, 3}));
  // Each image moved with its label.
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(a.train.sample(i)[0], f.train.sample(a.train.labels[i])[0]);

  fs::remove(dir_ / "t10k-labels-idx1-ubyte");
  const auto missing = dir_ / "t10k-labels-idx1-ubyte.gz";
  EXPECT_NE(error_of([&] { kiln::fashion_mnist::load(dir_); }, missing).find("no such file"), std::string::npos);
}

TEST(fashion_mnist, the_debian_package_data_loads_whole) {
  const fs::path dir(kiln::fashion_mnist::default_directory);
  if (!fs::exists(dir / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const auto f = kiln::fashion_mnist::load();
  EXPECT_EQ(f.train.size(), 60000u);
  EXPECT_EQ(f.test.size(), 10000u);
  std::vector<int> count(10);
  for (auto l : f.test.labels) ++count[l];
  for (int c : count) EXPECT_EQ(c, 1000);
  float lo = 1, hi = 0;
  for (float x : f.train.features) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
}
}  // namespace

namespace {
TEST(text, vocabulary_round_trips_printable_text) {
  const auto t = kiln::char_vocabulary::encode("Hi!\n\tok\x01~");
  EXPECT_EQ(t, (std::vector<std::uint32_t>{'H' - 31, 'i' - 31, '!' - 31, 0, 1, 'o' - 31, 'k' - 31, '~' - 31}));
  EXPECT_EQ(kiln::char_vocabulary::decode(t), "Hi!\n ok~");
  EXPECT_EQ(kiln::char_vocabulary::token('~'), kiln::char_vocabulary::size - 1);
}

TEST(text, next_token_windows_are_labelled_with_what_follows) {
  const std::vector<std::uint32_t> ids{1, 2, 3, 4, 5, 6, 7};
  const kiln::dataset d = kiln::next_token_dataset(ids, 3, 2, "toy");
  ASSERT_EQ(d.size(), 2u);  // windows at 0 and 2; at 4 nothing would follow
  EXPECT_EQ(d.features, (std::vector<float>{1, 2, 3, 3, 4, 5}));
  EXPECT_EQ(d.labels, (std::vector<std::uint32_t>{4, 6}));
}

TEST(text, sequence_windows_are_labelled_with_the_window_shifted_by_one) {
  const std::vector<std::uint32_t> ids{1, 2, 3, 4, 5, 6, 7};
  const kiln::dataset d = kiln::sequence_dataset(ids, 3, 2, "toy");
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.features, (std::vector<float>{1, 2, 3, 3, 4, 5}));
  EXPECT_EQ(d.labels, (std::vector<std::uint32_t>{2, 3, 4, 4, 5, 6}));
  EXPECT_EQ(d.labels_per_sample(), 3u);
}

TEST(text, sample_token_follows_the_softmax_of_the_scores) {
  kiln::rng g(3);
  const std::vector<float> scores{0.0f, std::log(3.0f), -50.0f};  // probabilities 1/4, 3/4, ~0
  std::size_t ones = 0, twos = 0;
  for (int i = 0; i < 4000; ++i) {
    const auto t = kiln::sample_token(scores, 1.0, g);
    ones += t == 1;
    twos += t == 2;
  }
  EXPECT_NEAR(static_cast<double>(ones), 3000.0, 4 * 27.4);  // binomial(4000, 3/4): sd 27.4
  EXPECT_EQ(twos, 0u);
  // A low temperature picks the top score.
  for (int i = 0; i < 100; ++i) EXPECT_EQ(kiln::sample_token(scores, 0.01, g), 1u);
  EXPECT_THROW(kiln::sample_token(scores, 0.0, g), std::invalid_argument);
}

TEST(text, a_missing_corpus_is_named) {
  try {
    kiln::load_fortunes("/nonexistent/fortunes");
    FAIL() << "no exception";
  } catch (const kiln::data_error& e) {
    EXPECT_STREQ(e.what(), "kiln: /nonexistent/fortunes: no such directory (install the Debian package fortunes)");
  }
}
}  // namespace
