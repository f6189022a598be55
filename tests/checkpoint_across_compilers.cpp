// One checkpoint, two compilers: `save FILE` writes a checkpoint of a small
// model whose tags and sub-model live where g++ and Clang spell names
// differently (an anonymous namespace, a class template in a nested
// namespace, kiln's automatic tags), the sub-model also inside a
// position_wise; `load FILE` loads one and checks every stored value.
// scripts/test saves with the g++ build and loads with the clang++-14 and
// clang++-16 builds, and the reverse; CTest runs both halves in one build.
//
//   kiln_checkpoint_across_compilers save FILE | load FILE | signature
#include <kiln/kiln.hpp>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <string_view>
#include <vector>

namespace {
struct anon_table;  // embedding ↔ unembed
/// A model used as a layer, named where the compilers disagree.
struct block : kiln::model<kiln::input<4>, kiln::dense<4>, kiln::relu> {};
}  // namespace

namespace outer::inner {
template <class T, std::size_t N>
struct weight;
}  // namespace outer::inner

namespace {
using namespace kiln;
using net = model<input_tokens<3>, embedding<6, 4, tied<anon_table>>, position_wise<block>, flatten,
                  dense<4, tied<outer::inner::weight<float, 2>>>, batch_norm, residual<block>, block,
                  unembed<tied<anon_table>>>;
using program_type = decltype(compile<net, batch<2>>(0));

constexpr std::size_t optimizer_scalars = 5;
constexpr training_position position{7, 70, 11, {1, 2, 3, 4}, 0.5, 0.25, 1, 1, 3};

/// Exact in float: what the saving side writes and the loading side expects.
float pattern(std::size_t i, std::size_t salt) { return static_cast<float>((i * 37 + salt) % 101) / 16.0f - 3.0f; }

void fill(std::span<float> buffer, std::size_t salt) {
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = pattern(i, salt);
}

/// Counts the stored values (padding excluded) that differ from the pattern.
template <class Layout>
std::size_t mismatches(std::span<const float> buffer, std::size_t salt) {
  std::size_t bad = 0;
  for (std::size_t t = 0; t < Layout::tensor_count; ++t)
    for (std::size_t j = Layout::offsets[t]; j < Layout::offsets[t] + Layout::sizes[t]; ++j)
      bad += buffer[j] != pattern(j, salt);
  return bad;
}

int save(const char* file) {
  auto p = compile<net, batch<2>>(1);
  fill(p.parameters(), 0);
  fill(p.state(), 1);
  std::vector<float> optimizer(optimizer_scalars);
  fill(optimizer, 2);
  save_checkpoint(file, p, std::span<const float>(optimizer), "sgd", position);
  std::printf("saved %s\n", file);
  return 0;
}

int load(const char* file) {
  auto p = compile<net, batch<2>>(2);
  std::vector<float> optimizer(optimizer_scalars);
  const auto at = load_checkpoint(file, p, std::span<float>(optimizer), "sgd");
  std::size_t bad = mismatches<program_type::layout>(p.parameters(), 0) +
                    mismatches<program_type::state_layout>(p.state(), 1);
  for (std::size_t i = 0; i < optimizer.size(); ++i) bad += optimizer[i] != pattern(i, 2);
  if (at.epoch != position.epoch || at.step != position.step || at.rng != position.rng ||
      at.step_in_epoch != position.step_in_epoch)
    ++bad;
  if (bad) {
    std::fprintf(stderr, "loaded %s, but %zu values differ from what was saved\n", file, bad);
    return 1;
  }
  std::printf("loaded %s: every value as saved\n", file);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string_view command = argc > 1 ? argv[1] : "";
  try {
    if (command == "save" && argc == 3) return save(argv[2]);
    if (command == "load" && argc == 3) return load(argv[2]);
    if (command == "signature" && argc == 2) {
      std::fputs(net::signature().c_str(), stdout);
      return 0;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: %s save FILE | load FILE | signature\n", argc > 0 ? argv[0] : "checkpoint_across_compilers");
  return 2;
}
