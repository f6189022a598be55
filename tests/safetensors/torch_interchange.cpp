// kiln's half of the safetensors test against PyTorch
// (tests/reference/safetensors_torch.py drives it):
//   kiln_safetensors_torch export DIR   for each model: DIR/NAME.safetensors
//                                       (kiln's weights, every value non-zero) and
//                                       DIR/NAME.kiln.json (inputs and kiln's eval outputs)
//   kiln_safetensors_torch import DIR   for each model: loads DIR/NAME.torch.safetensors
//                                       (PyTorch's weights), runs DIR/NAME.torch.json's
//                                       inputs, writes DIR/NAME.kiln_out.json
#include <kiln/kiln.hpp>
#include <kiln/safetensors.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {
using namespace kiln;
namespace fs = std::filesystem;

constexpr std::size_t batch_size = 3;

using mlp = model<input<784>, dense<256>, relu, dense<10>>;
// examples/fashion_mnist_cnn.cpp's model
using cnn = model<input<1, 28, 28>, conv2d<16, 5, 1, same>, batch_norm, relu, max_pool<2>, conv2d<32, 5, 1, same>,
                  batch_norm, relu, max_pool<2>, flatten, dense<128>, relu, dropout<1, 4>, dense<10>>;
struct chars;
using gpt = model<input_tokens<8>, embedding<17, 16, tied<chars>>, position_embedding, transformer_block<2>,
                  transformer_block<4, 24>, layer_norm, unembed<tied<chars>>>;
struct block : model<input<6>, dense<6>, gelu> {};
using res = model<input<5>, dense<6>, residual<dense<6>, kiln::tanh, dense<6>>, block, dense<3>>;

void write_json(const fs::path& file, const nlohmann::json& j) {
  std::ofstream(file) << j.dump();
  if (!fs::exists(file)) throw std::runtime_error("cannot write " + file.string());
}

template <class P>
std::vector<double> outputs(P& p) {
  p.set_training(false);
  p.forward();
  return {p.output().begin(), p.output().end()};
}

/// Weights drawn from `seed`, every value moved off its initial one (biases
/// and running statistics non-zero), saved; the outputs on inputs drawn too.
template <class Model, class T = float>
void export_case(const fs::path& dir, const std::string& name, std::uint64_t seed, bool tokens = false) {
  auto p = compile<Model, batch<batch_size>, precision<T>>(seed);
  rng g(seed, 5);
  for (const auto& t : detail::state_dict_of<Model>().tensors) {
    using role = detail::state_dict_tensor::role;
    if (t.kind == role::batch_counter) continue;
    auto values = (t.kind == role::parameter ? p.parameters() : p.state()).subspan(t.offset, t.size);
    for (auto& v : values)
      v = t.kind == role::parameter ? v + static_cast<T>(0.05 * g.uniform(-1, 1))
                                    : static_cast<T>(t.name.ends_with("var") ? g.uniform(0.5, 1.5) : g.uniform(-0.2, 0.2));
  }
  p.set_step(11);
  for (auto& x : p.input()) x = static_cast<T>(tokens ? static_cast<double>(g.below(17)) : g.uniform(-2, 2));
  save_safetensors(dir / (name + ".safetensors"), p, {{"kiln.case", name}});
  write_json(dir / (name + ".kiln.json"),
             {{"input_shape", Model::input_shape_type::extents}, {"x", std::vector<double>(p.input().begin(), p.input().end())},
              {"y", outputs(p)}});
}

/// PyTorch's weights and inputs in, kiln's outputs out (and the file's metadata).
template <class Model, class T = float>
void import_case(const fs::path& dir, const std::string& name, const std::string& file, bool ignore_unknown = false) {
  auto p = compile<Model, batch<batch_size>, precision<T>>(1);
  const auto meta = load_safetensors(dir / (file + ".torch.safetensors"), p, {.ignore_unknown_tensors = ignore_unknown});
  std::ifstream in(dir / (name + ".torch.json"));
  const auto j = nlohmann::json::parse(in);
  const auto x = j.at("x").get<std::vector<double>>();
  if (x.size() != p.input().size()) throw std::runtime_error(name + ": wrong input size");
  std::copy(x.begin(), x.end(), p.input().begin());
  write_json(dir / (file + ".kiln_out.json"), {{"y", outputs(p)}, {"metadata", meta}});
}
}  // namespace

int main(int argc, char** argv) try {
  if (argc != 3) throw std::runtime_error("usage: kiln_safetensors_torch export|import DIR");
  const std::string what = argv[1];
  const fs::path dir = argv[2];
  if (what == "export") {
    export_case<mlp>(dir, "mlp", 1);
    export_case<mlp, double>(dir, "mlp_f64", 2);
    export_case<cnn>(dir, "cnn", 3);
    export_case<gpt>(dir, "gpt", 4, /*tokens=*/true);
    export_case<res>(dir, "res", 5);
  } else if (what == "import") {
    import_case<mlp>(dir, "mlp", "mlp");
    import_case<mlp>(dir, "mlp", "mlp_bf16");  // the same weights in BF16
    import_case<mlp, double>(dir, "mlp_f64", "mlp_f64");
    import_case<cnn>(dir, "cnn", "cnn");
    import_case<gpt>(dir, "gpt", "gpt", /*ignore_unknown=*/true);  // (the attention masks PyTorch keeps)
    import_case<res>(dir, "res", "res");
  } else {
    throw std::runtime_error("usage: kiln_safetensors_torch export|import DIR");
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kiln_safetensors_torch: %s\n", e.what());
  return 1;
}
