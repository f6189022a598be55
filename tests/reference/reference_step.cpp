// Dumps kiln's SGD steps on small MLPs as JSON, for torch_optimizer_steps.py to
// replay in PyTorch and compare: initial parameters, batches, then for each
// step the loss and gradients, and the parameters after the last step.
#include <kiln/kiln.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace {
using namespace kiln;

template <class P>
std::string tensors(std::span<const typename P::scalar_type> flat) {
  using layout = typename P::layout;
  std::vector<std::string> out;
  for (std::size_t i = 0; i < layout::tensor_count; ++i) {
    auto t = flat.subspan(layout::offsets[i], layout::sizes[i]);
    out.push_back(fmt::format("[{:.17g}]", fmt::join(t, ",")));
  }
  return fmt::format("[{}]", fmt::join(out, ","));
}

std::string describe(const sgd& o) {
  return fmt::format(R"({{"name":"sgd","lr":{:.17g},"momentum":{:.17g},"weight_decay":{:.17g},"nesterov":{}}})",
                     double{o.lr}, double{o.momentum}, double{o.weight_decay}, o.nesterov);
}
template <bool Decoupled>
std::string describe(const detail::adam_family<Decoupled>& o) {
  return fmt::format(
      R"({{"name":"{}","lr":{:.17g},"beta1":{:.17g},"beta2":{:.17g},"eps":{:.17g},"weight_decay":{:.17g}}})",
      Decoupled ? "adamw" : "adam", double{o.lr}, double{o.beta1}, double{o.beta2}, double{o.eps},
      double{o.weight_decay});
}

template <class Model, class Scalar, class Loss, class Opt, std::size_t Batch = 4>
std::string run_case(const std::string& name, const std::string& layers, const Opt& opt, std::uint64_t seed) {
  auto p = compile<Model, batch<Batch>, precision<Scalar>, Loss>(seed);
  using P = decltype(p);
  rng g(seed, 5);
  for (auto& w : p.parameters()) w += static_cast<Scalar>(0.05 * g.uniform(-1, 1));  // non-zero biases
  // (padding scalars must stay zero: they are not parameters)
  using layout = typename P::layout;
  for (std::size_t i = 0; i < layout::tensor_count; ++i) {
    const std::size_t end = i + 1 < layout::tensor_count ? layout::offsets[i + 1] : layout::buffer_size;
    for (std::size_t k = layout::offsets[i] + layout::sizes[i]; k < end; ++k) p.parameters()[k] = 0;
  }
  const std::string initial = tensors<P>(p.parameters());
  typename Opt::template state<Scalar> state(p.parameters().size());
  std::vector<std::string> steps;
  for (int step = 0; step < 3; ++step) {
    for (auto& x : p.input()) x = static_cast<Scalar>(g.uniform(-2, 2));
    std::vector<typename P::target_type> t(P::batch_size * P::targets_per_sample);
    for (auto& v : t) {
      if constexpr (std::is_same_v<typename P::target_type, std::uint32_t>) {
        v = static_cast<std::uint32_t>(g.below(P::bound_loss::class_count));
      } else {
        v = static_cast<float>(g.uniform(-1, 1));
      }
    }
    p.forward();
    const double loss = p.backward(t).loss;
    std::string targets;  // exact: a float target printed with 17 digits reads back as the same value
    if constexpr (std::is_same_v<typename P::target_type, float>) {
      targets = fmt::format("{:.17g}", fmt::join(t, ","));
    } else {
      targets = fmt::format("{}", fmt::join(t, ","));
    }
    steps.push_back(fmt::format(R"({{"x":[{:.17g}],"t":[{}],"loss":{:.17g},"grads":{}}})", fmt::join(p.input(), ","),
                                targets, loss,
                                tensors<P>(std::span<const Scalar>(p.gradients().data(), p.gradients().size()))));
    state.step(opt, p.parameters(), p.gradients(), static_cast<std::uint64_t>(step + 1));
  }
  // The state (batch_norm's running statistics) after the steps, tensor by tensor.
  using state_layout = typename P::state_layout;
  std::vector<std::string> running;
  for (std::size_t i = 0; i < state_layout::tensor_count; ++i)
    running.push_back(
        fmt::format("[{:.17g}]", fmt::join(p.state().subspan(state_layout::offsets[i], state_layout::sizes[i]), ",")));
  return fmt::format(
      R"({{"name":"{}","dtype":"{}","loss":"{}","batch":{},"input_shape":[{}],"layers":{},"optimizer":{},"initial":{},"steps":[{}],"final":{},"state":[{}]}})",
      name, std::is_same_v<Scalar, double> ? "float64" : "float32", Loss::name(), Batch,
      fmt::join(Model::input_shape_type::extents, ","), layers, describe(opt), initial, fmt::join(steps, ","),
      tensors<P>(p.parameters()), fmt::join(running, ","));
}
}  // namespace

int main() {
  using mlp = model<input<6>, dense<5>, relu, dense<4>, kiln::tanh, dense<3>>;
  const std::string mlp_layers = R"([["dense",6,5,true],["relu"],["dense",5,4,true],["tanh"],["dense",4,3,true]])";
  using reg = model<input<2, 2>, flatten, dense<5, no_bias>, sigmoid, dense<2>>;
  const std::string reg_layers = R"([["flatten"],["dense",4,5,false],["sigmoid"],["dense",5,2,true]])";
  // The seeds' tied chain: dense 32→10, dense 10→32, dense 32→10, no bias, first and third tied.
  struct shared_w;
  using tied_chain =
      model<input<32>, dense<10, no_bias, tied<shared_w>>, dense<32, no_bias>, dense<10, no_bias, tied<shared_w>>>;
  const std::string chain_layers =
      R"([["dense",32,10,false,"shared_w"],["dense",10,32,false],["dense",32,10,false,"shared_w"]])";
  using cnn = model<input<2, 6, 6>, conv2d<3, 3, 1, 1>, relu, max_pool<2>, conv2d<4, 2>, kiln::tanh, avg_pool<2>,
                    flatten, dense<3>>;
  const std::string cnn_layers =
      R"([["conv2d",2,3,3,1,1],["relu"],["max_pool",2,2],["conv2d",3,4,2,1,0],["tanh"],["avg_pool",2,2],)"
      R"(["flatten"],["dense",4,3,true]])";
  using normed = model<input<6>, dense<5>, gelu, layer_norm, dense<4>, softmax>;
  const std::string normed_layers = R"([["dense",6,5,true],["gelu"],["layer_norm",5],["dense",5,4,true],["softmax"]])";
  // The layers that contain layers or keep state.
  // (batch_norm after relu: right after a biased layer it would make that bias's gradient exactly zero
  // in theory, and rounding noise in practice, which no relative comparison can judge.)
  using bn_cnn = model<input<2, 5, 5>, conv2d<3, 3, 1, 1>, relu, batch_norm, max_pool<2>, flatten, dense<6>, kiln::tanh,
                       batch_norm, dense<3>>;
  const std::string bn_cnn_layers =
      R"([["conv2d",2,3,3,1,1],["relu"],["batch_norm",3,3],["max_pool",2,2],["flatten"],["dense",12,6,true],)"
      R"(["tanh"],["batch_norm",6,1],["dense",6,3,true]])";
  struct block : model<input<6>, dense<6>, gelu> {};
  using res = model<input<5>, dense<6>, residual<dense<6>, kiln::tanh, dense<6>>, block, dense<3>>;
  const std::string res_layers = R"([["dense",5,6,true],["residual",[["dense",6,6,true],["tanh"],["dense",6,6,true]]],)"
                                 R"(["sequential",[["dense",6,6,true],["gelu"]]],["dense",6,3,true]])";
  using attn = model<input<5, 8>, position_embedding, transformer_block<2, 12>, causal_self_attention<4>,
                     position_wise<dense<3>>>;
  const std::string attn_layers =
      R"([["position_embedding",5,8],["transformer_block",8,2,12,5],["attention",8,4,5],["dense",8,3,true]])";
  // The example transformer's shapes (examples/char_transformer.cpp: 64 positions of width 64, 4 heads of
  // 16, a hidden layer of 256), at 8 sequences a batch: 512 positions. Its f32 position-wise forward
  // products then take the direct route in 8 chunks of columns (256 x 512 x 64) and 32 (64 x 512 x 256),
  // their row-major weight copied whole first (with AVX-512: the rule for an operand in half the L2);
  // each head's causal products split at 32 positions (32 x 32 x 16, 64 x 32 x 16, ...).
  using long_attn = model<input<64, 64>, position_embedding, transformer_block<4, 256>, causal_self_attention<4>,
                          position_wise<dense<3>>>;
  const std::string long_attn_layers =
      R"([["position_embedding",64,64],["transformer_block",64,4,256,64],["attention",64,4,64],["dense",64,3,true]])";
  const sgd nesterov{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true};
  const sgd heavy{.lr = 0.05f, .momentum = 0.5f};
  std::vector<std::string> cases{
      run_case<mlp, double, softmax_cross_entropy<>>("mlp_ce_f64_nesterov", mlp_layers, nesterov, 1),
      run_case<mlp, float, softmax_cross_entropy<>>("mlp_ce_f32_nesterov", mlp_layers, nesterov, 2),
      run_case<mlp, double, softmax_cross_entropy<>>("mlp_ce_f64_momentum", mlp_layers, heavy, 3),
      run_case<reg, double, mse>("reg_mse_f64", reg_layers, heavy, 4),
      run_case<tied_chain, double, softmax_cross_entropy<>>("tied_chain_ce_f64", chain_layers, nesterov, 5),
      run_case<tied_chain, float, softmax_cross_entropy<>>("tied_chain_ce_f32", chain_layers, heavy, 6),
      run_case<mlp, double, softmax_cross_entropy<>>("mlp_ce_f64_adam", mlp_layers,
                                                     adam{.lr = 0.01f, .weight_decay = 0.01f}, 7),
      run_case<mlp, double, softmax_cross_entropy<>>("mlp_ce_f64_adamw", mlp_layers,
                                                     adamw{.lr = 0.01f, .beta1 = 0.8f, .weight_decay = 0.1f}, 8),
      run_case<reg, float, mse>("reg_mse_f32_adamw", reg_layers, adamw{.lr = 0.005f}, 9),
      run_case<cnn, double, softmax_cross_entropy<>>("cnn_ce_f64_nesterov", cnn_layers, nesterov, 10),
      run_case<cnn, float, softmax_cross_entropy<>>("cnn_ce_f32_adam", cnn_layers, adam{.lr = 0.01f}, 11),
      run_case<normed, double, mse>("gelu_layer_norm_softmax_mse_f64", normed_layers, nesterov, 12),
      run_case<bn_cnn, double, softmax_cross_entropy<>>("batch_norm_cnn_ce_f64", bn_cnn_layers, nesterov, 13),
      run_case<bn_cnn, float, softmax_cross_entropy<>>("batch_norm_cnn_ce_f32", bn_cnn_layers, heavy, 14),
      run_case<res, double, softmax_cross_entropy<>>("residual_sub_model_ce_f64", res_layers, nesterov, 15),
      run_case<attn, double, softmax_cross_entropy<>>("transformer_attention_ce_f64", attn_layers,
                                                      adamw{.lr = 0.01f, .weight_decay = 0.1f}, 16),
      run_case<attn, float, softmax_cross_entropy<>>("transformer_attention_ce_f32", attn_layers, nesterov, 17),
      run_case<long_attn, double, softmax_cross_entropy<>, adamw, 8>("transformer_64_positions_ce_f64",
                                                                     long_attn_layers, adamw{.lr = 0.01f}, 18),
      run_case<long_attn, float, softmax_cross_entropy<>, sgd, 8>("transformer_64_positions_ce_f32", long_attn_layers,
                                                                  nesterov, 19),
  };
  fmt::print("{{\"cases\":[{}]}}\n", fmt::join(cases, ","));
}
