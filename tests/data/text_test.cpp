// The text reader: bounded, gzip checked, and exactly the bytes it is given
// (plain text has no redundancy: a damaged byte reads as what it became).
#include <kiln/data/text.hpp>

#include <gtest/gtest.h>

#include "../support/files.hpp"

#include <string>

namespace {
using kiln::testing::bytes;
using kiln::testing::gzip;

class text_reader : public kiln::testing::file_test {
 protected:
  std::string fortunes(const bytes& b) {
    write("f", b);
    write("f.dat", {});
    return kiln::load_fortunes(dir_);
  }
};

const std::string sample = "Hi!\n%\nA fortune,\n\ttwo lines.\n%\n";

TEST_F(text_reader, reads_fortunes_without_the_separators_plain_or_gzip) {
  EXPECT_EQ(fortunes(bytes(sample.begin(), sample.end())), "Hi!\nA fortune,\n\ttwo lines.\n");
  EXPECT_EQ(kiln::read_text(write("f.gz", gzip(bytes(sample.begin(), sample.end())))), sample);
  EXPECT_EQ(kiln::fortune_text("no newline at the end"), "no newline at the end\n");
}

TEST_F(text_reader, every_truncation_and_bit_flip_reads_as_exactly_those_bytes) {
  const bytes whole(sample.begin(), sample.end());
  for (std::size_t n = 0; n <= whole.size(); ++n) {
    const std::string cut(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_EQ(fortunes(bytes(cut.begin(), cut.end())), kiln::fortune_text(cut)) << n;
  }
  for (std::size_t i = 0; i < whole.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes b = whole;
      b[i] ^= static_cast<unsigned char>(1u << bit);
      EXPECT_EQ(fortunes(b), kiln::fortune_text(std::string(b.begin(), b.end()))) << i << "/" << bit;
    }
  }
}

TEST_F(text_reader, gzip_text_cut_short_or_damaged_is_named) {
  const bytes gz = gzip(bytes(sample.begin(), sample.end()));
  for (std::size_t n = 2; n < gz.size(); ++n) {  // (one byte is not yet gzip: plain text)
    const auto p = write("t.gz", bytes(gz.begin(), gz.begin() + static_cast<std::ptrdiff_t>(n)));
    EXPECT_NE(kiln::testing::error_of<kiln::data_error>([&] { kiln::read_text(p); }, p).find("truncated"),
              std::string::npos)
        << n;
  }
  bytes crc = gz;
  crc[crc.size() - 6] ^= 4;
  const auto p = write("crc.gz", crc);
  EXPECT_NE(kiln::testing::error_of<kiln::data_error>([&] { kiln::read_text(p); }, p).find("incorrect data check"),
            std::string::npos);
  const auto d = dir_ / "nothing";
  EXPECT_NE(kiln::testing::error_of<kiln::data_error>([&] { kiln::read_text(d); }, d).find("no such file"),
            std::string::npos);
}
}  // namespace
