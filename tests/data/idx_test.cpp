// The IDX reader against hostile and damaged files: headers that announce
// more than the file holds, gzip trailers, multi-member gzip, and every
// truncation and single-bit flip of a small file.
#include <kiln/data/idx.hpp>

#include <gtest/gtest.h>

#include "../support/files.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace {
using kiln::data_error;
using kiln::testing::bytes;
using kiln::testing::gzip;
using kiln::testing::idx_file;

class idx_reader : public kiln::testing::file_test {
 protected:
  std::string error(const std::filesystem::path& p) {
    return kiln::testing::error_of<data_error>([&] { kiln::idx::read(p); }, p);
  }
};

const bytes small = idx_file({2, 3}, {1, 2, 3, 4, 5, 6});

TEST_F(idx_reader, a_header_announcing_more_than_the_file_holds_is_refused_before_allocating) {
  const auto p = write("huge", idx_file({0xFFFFFFFFu}, {1, 2, 3}));  // 11 bytes announcing 4 GiB
  EXPECT_NE(error(p).find("truncated: the data needs 4294967295 bytes but only 3 are there"), std::string::npos);
  const auto g = write("huge.gz", gzip(idx_file({0xFFFFFFFFu}, {1, 2, 3})));
  EXPECT_NE(error(g).find("truncated: the data needs 4294967295 bytes but only 3 are there"), std::string::npos);
}

TEST_F(idx_reader, extents_whose_product_overflows_are_an_error_not_an_empty_array) {
  const auto p = write("wraps", idx_file({65536, 65536, 65536, 65536}, {}));  // 2^64 elements: 0 modulo 2^64
  EXPECT_NE(error(p).find("the extents (65536 x 65536 x 65536 x 65536) announce more elements than any file can hold"),
            std::string::npos);
  const auto z = write("zero", idx_file({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0}, {}));  // a zero extent: empty
  EXPECT_TRUE(kiln::idx::read(z).data.empty());
}

TEST_F(idx_reader, a_gzip_file_cut_in_its_trailer_is_truncated) {
  const bytes gz = gzip(small);
  for (std::size_t cut = 1; cut <= 8; ++cut) {
    const auto p = write("cut.gz", bytes(gz.begin(), gz.end() - static_cast<std::ptrdiff_t>(cut)));
    EXPECT_NE(error(p).find("truncated: the gzip stream stops before its end"), std::string::npos) << cut;
  }
}

TEST_F(idx_reader, a_gzip_crc_or_length_that_does_not_match_is_corrupt) {
  bytes crc = gzip(small), length = crc;
  crc[crc.size() - 8] ^= 1;        // CRC-32 of the data
  length[length.size() - 4] ^= 1;  // ISIZE
  EXPECT_NE(error(write("crc.gz", crc)).find("corrupt compressed data (incorrect data check)"), std::string::npos);
  EXPECT_NE(error(write("len.gz", length)).find("corrupt compressed data (incorrect length check)"), std::string::npos);
}

TEST_F(idx_reader, gzip_members_may_follow_each_other_but_nothing_else) {
  bytes two = gzip(bytes(small.begin(), small.begin() + 7));
  const bytes rest = gzip(bytes(small.begin() + 7, small.end()));
  two.insert(two.end(), rest.begin(), rest.end());
  const auto a = kiln::idx::read(write("two.gz", two));
  EXPECT_EQ(a.extents, (std::vector<std::size_t>{2, 3}));
  EXPECT_EQ(a.data, (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));

  bytes garbage = gzip(small);
  garbage.insert(garbage.end(), {0, 0, 0});
  EXPECT_NE(
      error(write("garbage.gz", garbage)).find("3 bytes after the end of the gzip stream are not another gzip member"),
      std::string::npos);
}

TEST_F(idx_reader, every_truncation_of_a_small_file_is_named) {
  for (const bool gz : {false, true}) {
    const bytes whole = gz ? gzip(small) : small;
    for (std::size_t n = 0; n < whole.size(); ++n) {
      const auto p = write(gz ? "t.gz" : "t", bytes(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(n)));
      EXPECT_NE(error(p).find("truncated"), std::string::npos) << (gz ? "gzip" : "plain") << ", cut at " << n;
    }
  }
}

TEST_F(idx_reader, every_bit_flip_of_a_plain_file_is_named_or_is_exactly_that_data_byte) {
  // Plain IDX has no checksum: a flip in the data is the data (nothing can
  // tell it); a flip in the header must never pass.
  constexpr std::size_t header = 4 + 2 * 4;
  for (std::size_t i = 0; i < small.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes b = small;
      b[i] ^= static_cast<unsigned char>(1u << bit);
      const auto p = write("f", b);
      if (i < header) {
        EXPECT_FALSE(error(p).empty()) << "byte " << i << " bit " << bit;
      } else {
        const auto a = kiln::idx::read(p);
        EXPECT_EQ(a.extents, (std::vector<std::size_t>{2, 3}));
        EXPECT_EQ(a.data, std::vector<std::uint8_t>(b.begin() + header, b.end()));
      }
    }
  }
}

TEST_F(idx_reader, every_bit_flip_of_a_gzip_file_is_named_or_changes_nothing) {
  // Meaning-free for the data: FLG's FTEXT bit (byte 3, bit 0), MTIME
  // (bytes 4-7), XFL (8), OS (9): these must load unchanged. Anywhere else a
  // flip is an error about the stream (the whole stream is checked before
  // what it says is judged), or (the deflate stream's padding bits) changes
  // nothing.
  const bytes gz = gzip(small);
  std::size_t harmless_outside_header = 0;
  for (std::size_t i = 0; i < gz.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes b = gz;
      b[i] ^= static_cast<unsigned char>(1u << bit);
      const auto p = write("f.gz", b);
      const bool meaning_free = (i == 3 && bit == 0) || (i >= 4 && i <= 9);
      if (meaning_free) {
        EXPECT_EQ(kiln::idx::read(p).data, (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6})) << i << "/" << bit;
        continue;
      }
      try {
        const auto a = kiln::idx::read(p);
        EXPECT_EQ(a.extents, (std::vector<std::size_t>{2, 3})) << "byte " << i << " bit " << bit;
        EXPECT_EQ(a.data, (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6})) << "byte " << i << " bit " << bit;
        EXPECT_EQ(i, gz.size() - 9) << "bit " << bit << ": only the last deflate byte has unused bits";
        ++harmless_outside_header;
      } catch (const data_error& e) {
        EXPECT_EQ(e.file(), p);
        const std::string m = e.what();
        const bool not_gzip = i < 2;  // then it is read as a plain file
        EXPECT_TRUE(m.find("corrupt compressed data") != std::string::npos ||
                    m.find("truncated: the gzip stream stops before its end") != std::string::npos ||
                    (not_gzip && m.find("wrong magic number") != std::string::npos))
            << "byte " << i << " bit " << bit << ": " << m;
      }
    }
  }
  // Only the last deflate byte's unused padding bits can be harmless (at most 7).
  EXPECT_LE(harmless_outside_header, 7u);
}
}  // namespace
