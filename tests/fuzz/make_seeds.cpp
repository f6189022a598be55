// Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/...): small
// valid files of each kind. Run once from the repository root:
//   g++ -std=c++20 -Iinclude tests/fuzz/make_seeds.cpp -lfmt -lz -lgtest && ./a.out
#include <kiln/checkpoint.hpp>

#include "../support/fake_program.hpp"
#include "../support/files.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {
using kiln::testing::bytes;
namespace fs = std::filesystem;

void put(const fs::path& f, const bytes& b) {
  fs::create_directories(f.parent_path());
  std::ofstream(f, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
bytes text(const std::string& s) { return {s.begin(), s.end()}; }
}  // namespace

int main() {
  const fs::path root = "tests/fuzz/corpus";
  using kiln::testing::gzip;
  using kiln::testing::idx_file;
  const std::vector<bytes> idx{idx_file({2, 3}, {1, 2, 3, 4, 5, 6}), idx_file({5}, {0, 9, 4, 1, 7}),
                               idx_file({2, 2, 2}, {0, 255, 1, 254, 2, 253, 3, 252}), idx_file({0, 7}, {}),
                               idx_file({1, 4, 4}, bytes(16, 128))};
  for (std::size_t i = 0; i < idx.size(); ++i) {
    put(root / "idx_plain" / ("seed" + std::to_string(i)), idx[i]);
    put(root / "idx_gzip" / ("seed" + std::to_string(i) + ".gz"), gzip(idx[i]));
  }
  bytes members = gzip(bytes(idx[0].begin(), idx[0].begin() + 9));
  const bytes rest = gzip(bytes(idx[0].begin() + 9, idx[0].end()));
  members.insert(members.end(), rest.begin(), rest.end());
  put(root / "idx_gzip" / "two_members.gz", members);

  const std::vector<std::string> texts{"Hi!\n%\nA fortune,\n\ttwo lines.\n%\n", "", "no newline", "%\n%\n\n"};
  for (std::size_t i = 0; i < texts.size(); ++i) put(root / "text" / ("seed" + std::to_string(i)), text(texts[i]));
  put(root / "text" / "seed.gz", gzip(text(texts[0])));

  fs::create_directories(root / "checkpoint");
  const std::vector<float> velocity{0.5f, -0.25f, 2.0f};
  const kiln::training_position at{3, 40, 9, {1, 2, 3, 4}, 0.5, 0.25, 1, 1, 2};
  kiln::save_checkpoint(root / "checkpoint" / "float.kiln", kiln::testing::fake_program<float>::filled(1.0f),
                        std::span<const float>(velocity), "sgd", at);
  const std::vector<double> velocity64{0.5, -0.25, 2.0};
  kiln::save_checkpoint(root / "checkpoint" / "double.kiln", kiln::testing::fake_program<double>::filled(1.0),
                        std::span<const double>(velocity64), "sgd", at);
  kiln::save_checkpoint(root / "checkpoint" / "bare.kiln", kiln::testing::fake_program<float>::filled(2.0f));
}
