// CSV in: labels, targets, header names, delimiters, gzip, and every bad
// value named by file, line and column.
#include <kiln/data/csv.hpp>

#include <gtest/gtest.h>

#include "support/files.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace {
using kiln::data_error;
using kiln::testing::bytes;

class csv : public kiln::testing::file_test {
 protected:
  std::filesystem::path text(const std::string& name, const std::string& s, bool gz = false) {
    const bytes b(s.begin(), s.end());
    return write(name, gz ? kiln::testing::gzip(b) : b);
  }
  /// The message of the data_error that reading `f` with `o` throws.
  static std::string error_of(const std::filesystem::path& f, const kiln::csv::options& o = {}) {
    return kiln::testing::error_of<data_error>([&] { kiln::csv::read(f, o); }, f);
  }
};

TEST_F(csv, features_and_the_last_column_as_label) {
  const auto f = text("a.csv", "x,y,z,class\n1,2,3,0\n4.5,-5,6e1,2\n");
  const kiln::dataset d = kiln::csv::read(f);
  EXPECT_EQ(d.name, "a.csv");
  EXPECT_EQ(d.sample_shape, std::vector<std::size_t>{3});
  EXPECT_EQ(d.features, (std::vector<float>{1, 2, 3, 4.5f, -5, 60}));
  EXPECT_EQ(d.labels, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_TRUE(d.targets.empty());
}

TEST_F(csv, label_anywhere_other_delimiter_quotes_no_header_shape_and_gzip) {
  const auto f = text("b.csv.gz", "7;\"1\";2;3;4\r\n\n1;5;6;7;8\r\n", /*gz=*/true);
  const kiln::dataset d =
      kiln::csv::read(f, {.name = "b", .delimiter = ';', .header = false, .label_column = 0, .sample_shape = {2, 2}});
  EXPECT_EQ(d.name, "b");
  EXPECT_EQ(d.sample_shape, (std::vector<std::size_t>{2, 2}));
  EXPECT_EQ(d.features, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(d.labels, (std::vector<std::uint32_t>{7, 1}));
}

TEST_F(csv, several_target_columns_for_regression) {
  const auto f = text("r.csv", "a,t1,b,t2\n1,10,2,20\n3,30,4,40");  // no newline at the end
  const kiln::dataset d = kiln::csv::read(f, {.target_columns = {-1, 1}});
  EXPECT_EQ(d.features, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(d.target_size, 2u);
  EXPECT_EQ(d.targets, (std::vector<float>{20, 10, 40, 30}));
  EXPECT_TRUE(d.labels.empty());
  const kiln::dataset x = kiln::csv::read(f, {.label_column = std::nullopt});
  EXPECT_EQ(x.features.size(), 8u);
  EXPECT_TRUE(x.labels.empty());
}

TEST_F(csv, the_bundled_digits_of_scikit_learn) {
  const std::filesystem::path digits = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
  if (!std::filesystem::exists(digits)) GTEST_SKIP() << "python3-sklearn is not installed";
  const kiln::dataset d = kiln::csv::read(digits, {.header = false, .sample_shape = {8, 8}});
  ASSERT_EQ(d.size(), 1797u);
  EXPECT_EQ(d.labels[0], 0u);
  EXPECT_EQ(d.labels[1], 1u);
  EXPECT_EQ(*std::max_element(d.labels.begin(), d.labels.end()), 9u);
  EXPECT_EQ(*std::max_element(d.features.begin(), d.features.end()), 16.f);
  EXPECT_EQ(d.features[2], 5.f);  // the first row begins 0,0,5,13,9,1
}

TEST_F(csv, a_missing_value_is_named_by_line_and_column) {
  const auto f = text("m.csv", "alcohol,ash,class\n1,2,0\n3,,1\n");
  EXPECT_EQ(error_of(f), "kiln: " + f.string() + ": line 3, column 2 ('ash'): missing value");
  const auto g = text("m2.csv", "1,2,0\n3,4,\n");
  EXPECT_EQ(error_of(g, {.header = false}), "kiln: " + g.string() + ": line 2, column 3: missing value");
}

TEST_F(csv, bad_values_are_named) {
  EXPECT_NE(error_of(text("a.csv", "a,b\n1,x\n")).find("line 2, column 2 ('b'): label 'x' is not a whole number"),
            std::string::npos);
  EXPECT_NE(error_of(text("b.csv", "a,b\n1,-1\n")).find("label '-1' is not a whole number"), std::string::npos);
  EXPECT_NE(error_of(text("c.csv", "a,b\n1.5x,1\n")).find("line 2, column 1 ('a'): '1.5x' is not a finite number"),
            std::string::npos);
  EXPECT_NE(error_of(text("d.csv", "a,b\nnan,1\n")).find("'nan' is not a finite number"), std::string::npos);
  EXPECT_NE(error_of(text("e.csv", "a,b\n1e39,1\n")).find("'1e39' is not a finite number"), std::string::npos);
  // A long field is quoted by its first 40 bytes.
  EXPECT_NE(error_of(text("f.csv", "a,b\n" + std::string(100, 'x') + ",1\n")).find("'" + std::string(40, 'x') + "...'"),
            std::string::npos);
}

TEST_F(csv, rows_of_another_width_bad_quotes_and_absent_columns) {
  EXPECT_NE(error_of(text("a.csv", "a,b,c\n1,2,0\n1,2\n")).find("line 3: 2 fields, but the first row has 3"),
            std::string::npos);
  EXPECT_NE(error_of(text("b.csv", "a,b,c\n1,2,0\n1,2,3,4\n")).find("line 3: more than the 3 fields"),
            std::string::npos);
  EXPECT_NE(error_of(text("c.csv", "a,b\n1,\"2\n")).find("malformed CSV"), std::string::npos);
  EXPECT_NE(error_of(text("d.csv", "a,b\n1,2\n"), {.label_column = 5})
                .find("the label column 5 is not there: the first row has 2 columns"),
            std::string::npos);
  EXPECT_NE(error_of(text("e.csv", "a,b\n1,2\n"), {.target_columns = {0, -2}}).find("column 1 is asked for twice"),
            std::string::npos);
  EXPECT_NE(error_of(text("f.csv", "a,b,c\n1,2,0\n"), {.sample_shape = {2, 2}})
                .find("2 feature columns do not make samples of shape {2, 2}"),
            std::string::npos);
  EXPECT_EQ(error_of(text("g.csv", "a,b\n")), "kiln: " + (dir_ / "g.csv").string() + ": no rows after the header");
  EXPECT_NE(error_of(dir_ / "absent.csv").find("no such file"), std::string::npos);
}

TEST_F(csv, a_field_over_one_mebibyte_is_refused_not_grown) {
  std::string s = "a,b\n1,\"";
  s.append((std::size_t{1} << 20) + 1, '7');
  s += "\"\n";
  EXPECT_NE(error_of(text("big.csv", s)).find("line 2: a field longer than 1048576 bytes"), std::string::npos);
}

TEST_F(csv, damaged_gzip_is_reported_as_such) {
  bytes z = kiln::testing::gzip(bytes(100, '1'));
  z.resize(z.size() - 6);  // cut into the trailer
  const auto f = write("cut.csv.gz", z);
  EXPECT_NE(error_of(f, {.header = false}).find("truncated"), std::string::npos);
}

}  // namespace
