#include <kiln/kiln.hpp>
#ifdef KILN_CONSUMER_SAFETENSORS
#include <kiln/safetensors.hpp>
#endif
#ifdef KILN_CONSUMER_CSV
#include <kiln/data/csv.hpp>
#endif
#ifdef KILN_CONSUMER_NPZ
#include <kiln/data/npz.hpp>
#endif

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

using namespace kiln;
using net = model<input<4>, dense<8>, relu, dense<3>>;
static_assert(net::parameter_count == 4 * 8 + 8 + 8 * 3 + 3);

// Every kind of layer, so that strict flags see all of kiln's code a model can use.
using cnn = model<input<1, 8, 8>, conv2d<4, 3, 1, same>, batch_norm, relu, max_pool<2>, flatten, dense<16>, gelu,
                  dropout<1, 4>, dense<8>, kiln::tanh, dense<8>, sigmoid, dense<3>>;
struct chars;
using gpt = model<input_tokens<8>, embedding<16, 16, tied<chars>>, position_embedding, transformer_block<2>, layer_norm,
                  unembed<tied<chars>>>;
using regression = model<input<4>, dense<8>, relu, dense<3>, softmax>;

/// One training step of M with optimizer O; its loss.
template <class Program, class Optimizer>
double one_step(Program& p, const std::vector<typename Program::target_type>& targets, Optimizer o) {
  for (std::size_t i = 0; i < p.input().size(); ++i) p.input()[i] = static_cast<float>(i % 7);
  typename Optimizer::template state<float> s(p.parameters().size());
  return train_step(p, targets, o, s).loss;
}

int main() {
  auto p = compile<net, batch<2>>(1);
  for (auto& x : p.input()) x = 1.0f;
  p.forward();
  const std::uint32_t t[2] = {0, 2};
  const double loss = p.backward(t).loss;
  std::printf("consumer: %s\nloss %.4f\n", net::summary().c_str(), loss);
  {
    auto c = compile<cnn, batch<2>>(1);
    auto g = compile<gpt, batch<2>>(1);
    auto r = compile<regression, batch<2>, mse>(1);
    const double losses[] = {one_step(c, {0, 2}, sgd{.lr = 0.01f, .momentum = 0.9f}),
                             one_step(g, std::vector<std::uint32_t>(16, 3), adam{.lr = 1e-3f}),
                             one_step(r, std::vector<float>(6, 0.25f), sgd{.lr = 0.01f})};
    for (double l : losses)
      if (!(l > 0)) return 5;
    std::printf("cnn, transformer, regression: one step each\n");
  }
  const auto dir = std::filesystem::temp_directory_path();
#ifdef KILN_CONSUMER_SAFETENSORS
  {  // weights out and back in
    const auto file = dir / "kiln_consumer.safetensors";
    save_safetensors(file, p);
    auto q = compile<net, batch<2>>(2);
    load_safetensors(file, q);
    std::filesystem::remove(file);
    if (!std::equal(p.parameters().begin(), p.parameters().end(), q.parameters().begin())) return 2;
    std::printf("safetensors: round trip\n");
  }
#endif
#ifdef KILN_CONSUMER_CSV
  {  // a CSV file in
    const auto file = dir / "kiln_consumer.csv";
    std::ofstream(file) << "a,b,c,d,label\n1,2,3,4,0\n5,6,7,8,2\n";
    const dataset d = csv::read(file);
    std::filesystem::remove(file);
    if (d.size() != 2 || d.labels != std::vector<std::uint32_t>{0, 2}) return 3;
    std::printf("csv: %zu samples\n", d.size());
  }
#endif
#ifdef KILN_CONSUMER_NPZ
  try {  // (a missing file is refused, naming it)
    (void)npz::load(dir / "kiln_consumer_missing.npz");
    return 4;
  } catch (const data_error& e) {
    std::printf("npz: %s\n", e.what());
  }
#endif
  return loss > 0 ? 0 : 1;
}
