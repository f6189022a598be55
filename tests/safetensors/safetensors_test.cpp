// kiln/safetensors.hpp on real models: the names and shapes of PyTorch's
// state_dict, round trips (f32, f64, bf16 programs, stores), metadata, the
// dtypes read, and what a file of another model is told.
#include <kiln/kiln.hpp>
#include <kiln/safetensors.hpp>

#include <gtest/gtest.h>

#include "../../examples/custom_layer.hpp"
#include "../support/files.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

// A layer of one's own names its values by specialising kiln::state_dict_names.
template <std::size_t Units>
struct kiln::state_dict_names<project<Units>> : kiln::state_dict_names<void> {
  static constexpr std::array<std::string_view, 1> parameters{"weight"};
};

namespace {
using namespace kiln;
using kiln::testing::bytes;
using role = detail::state_dict_tensor::role;

using mlp = model<input<784>, dense<256>, relu, dense<10>>;
using cnn = model<input<1, 28, 28>, conv2d<16, 5, 1, same>, batch_norm, relu, max_pool<2>, conv2d<32, 5, 1, same>,
                  batch_norm, relu, max_pool<2>, flatten, dense<128>, relu, dropout<1, 4>, dense<10>>;
struct chars;
using gpt = model<input_tokens<8>, embedding<17, 16, tied<chars>>, position_embedding, transformer_block<2>,
                  layer_norm, unembed<tied<chars>>>;
struct block : model<input<6>, dense<6>, gelu> {};
using res = model<input<5>, dense<6>, residual<dense<6>, kiln::tanh, dense<6>>, block, dense<3>>;
struct shared_w;
using transposed = model<input<4>, dense<3, no_bias, tied<shared_w>>, dense<4, no_bias, tied_transposed<shared_w>>,
                         dense<3, no_bias, tied<shared_w>>>;
using tiny = model<input<2>, dense<2>, batch_norm>;

/// "name [shape]" for every tensor, in order.
template <class Model>
std::vector<std::string> listing() {
  std::vector<std::string> out;
  for (const auto& t : detail::state_dict_of<Model>().tensors)
    out.push_back(t.name + " " + detail::shape_text(t.shape) + (t.kind == role::batch_counter ? " count" : ""));
  return out;
}
using names = std::vector<std::string>;

TEST(safetensors_names, an_mlp_is_an_nn_sequential_of_linear_layers) {
  EXPECT_EQ(listing<mlp>(), (names{"0.weight [256, 784]", "0.bias [256]", "2.weight [10, 256]", "2.bias [10]"}));
  EXPECT_TRUE(detail::state_dict_of<mlp>().aliases.empty());
}

TEST(safetensors_names, the_cnn_has_conv_weights_out_in_kh_kw_and_batch_norm_buffers) {
  EXPECT_EQ(listing<cnn>(),
            (names{"0.weight [16, 1, 5, 5]", "0.bias [16]", "1.weight [16]", "1.bias [16]", "1.running_mean [16]",
                   "1.running_var [16]", "1.num_batches_tracked [] count", "4.weight [32, 16, 5, 5]", "4.bias [32]",
                   "5.weight [32]", "5.bias [32]", "5.running_mean [32]", "5.running_var [32]",
                   "5.num_batches_tracked [] count", "9.weight [128, 1568]", "9.bias [128]", "12.weight [10, 128]",
                   "12.bias [10]"}));
}

TEST(safetensors_names, a_transformer_nests_and_its_tied_unembedding_is_an_alias_of_the_embedding) {
  EXPECT_EQ(listing<gpt>(),
            (names{"0.weight [17, 16]", "1.table [8, 16]", "2.0.body.0.weight [16]", "2.0.body.0.bias [16]",
                   "2.0.body.1.mha.in_proj_weight [48, 16]", "2.0.body.1.mha.in_proj_bias [48]",
                   "2.0.body.1.mha.out_proj.weight [16, 16]", "2.0.body.1.mha.out_proj.bias [16]",
                   "2.1.body.0.weight [16]", "2.1.body.0.bias [16]", "2.1.body.1.weight [64, 16]",
                   "2.1.body.1.bias [64]", "2.1.body.3.weight [16, 64]", "2.1.body.3.bias [16]", "3.weight [16]",
                   "3.bias [16]"}));
  EXPECT_EQ(detail::state_dict_of<gpt>().aliases, (std::vector<std::pair<std::string, std::string>>{
                                                      {"4.weight", "0.weight"}}));
}

TEST(safetensors_names, a_residual_has_a_body_and_a_model_used_as_a_layer_is_a_sequential) {
  EXPECT_EQ(listing<res>(), (names{"0.weight [6, 5]", "0.bias [6]", "1.body.0.weight [6, 6]", "1.body.0.bias [6]",
                                   "1.body.2.weight [6, 6]", "1.body.2.bias [6]", "2.0.weight [6, 6]",
                                   "2.0.bias [6]", "3.weight [3, 6]", "3.bias [3]"}));
}

TEST(safetensors_names, a_transposed_use_of_a_tied_weight_is_no_alias) {
  EXPECT_EQ(listing<transposed>(), (names{"0.weight [3, 4]"}));
  EXPECT_EQ(detail::state_dict_of<transposed>().aliases,
            (std::vector<std::pair<std::string, std::string>>{{"2.weight", "0.weight"}}));
}

TEST(safetensors_names, a_layer_of_ones_own_is_named_by_its_specialisation_or_param_i) {
  using custom = model<input<3>, scaled_tanh, project<2>>;
  EXPECT_EQ(listing<custom>(), (names{"0.param_0 [3]", "0.param_1 [3]", "1.weight [2, 3]"}));
}

class safetensors_file : public kiln::testing::file_test {};

template <class P>
void expect_same_values(const P& a, const P& b) {
  ASSERT_EQ(a.parameters().size(), b.parameters().size());
  for (std::size_t i = 0; i < a.parameters().size(); ++i) ASSERT_EQ(a.parameters()[i], b.parameters()[i]) << i;
  for (std::size_t i = 0; i < a.state().size(); ++i) ASSERT_EQ(a.state()[i], b.state()[i]) << i;
}

/// Distinct running statistics, so that loading them is seen.
template <class P>
void stir_state(P& p) {
  for (std::size_t i = 0; i < p.state().size(); ++i) p.state()[i] = static_cast<typename P::scalar_type>(0.5 + 0.25 * i);
}

TEST_F(safetensors_file, a_float_cnn_round_trips_bit_for_bit_as_f32_with_its_running_statistics) {
  auto a = compile<cnn, batch<2>>(1);
  stir_state(a);
  a.set_step(42);
  save_safetensors(dir_ / "cnn.safetensors", a);
  auto b = compile<cnn, batch<2>>(2);
  b.set_step(7);
  const auto meta = load_safetensors(dir_ / "cnn.safetensors", b);
  expect_same_values(a, b);
  EXPECT_EQ(b.step(), 7u);  // the step count is not the file's to set
  EXPECT_EQ(meta, (safetensors_metadata{{"format", "pt"}}));
  const bytes file = read(dir_ / "cnn.safetensors");
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);  // the data begins aligned
  const std::string header(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_NE(header.find(R"("0.weight":{"dtype":"F32","shape":[16,1,5,5],"data_offsets":[0,1600]})"),
            std::string::npos)
      << header;
  EXPECT_NE(header.find(R"("1.num_batches_tracked":{"dtype":"I64","shape":[])"), std::string::npos) << header;
  EXPECT_EQ(file.size(), 8 + n + 4 * (cnn::parameter_count + 2 * (16 + 32)) + 2 * 8);
}

TEST_F(safetensors_file, a_double_program_writes_f64_which_a_float_program_refuses_and_f32_loads_into_double) {
  auto d = compile<mlp, batch<1>, precision<double>>(3);
  save_safetensors(dir_ / "d.safetensors", d);
  auto f = compile<mlp, batch<1>>(4);
  const auto before = std::vector<float>(f.parameters().begin(), f.parameters().end());
  try {
    load_safetensors(dir_ / "d.safetensors", f);
    FAIL() << "loaded F64 into float";
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.fault(), checkpoint_fault::other_model);
    EXPECT_NE(std::string(e.what()).find("tensor '0.weight' is F64; this model takes F32, BF16 or F16"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(std::equal(before.begin(), before.end(), f.parameters().begin()));
  auto d2 = compile<mlp, batch<1>, precision<double>>(5);
  load_safetensors(dir_ / "d.safetensors", d2);
  expect_same_values(d, d2);
  save_safetensors(dir_ / "f.safetensors", f);
  load_safetensors(dir_ / "f.safetensors", d2);
  for (std::size_t i = 0; i < f.parameters().size(); ++i)
    ASSERT_EQ(d2.parameters()[i], static_cast<double>(f.parameters()[i]));
}

TEST_F(safetensors_file, stores_and_bf16_programs_share_the_f32_file_and_ties_stay_one_tensor) {
  parameter_store<gpt> store(6);
  save_safetensors(dir_ / "gpt.safetensors", store, {{"note", "from a store"}});
  auto bf = compile<gpt, batch<1>, precision<bf16>>(7);
  const auto meta = load_safetensors(dir_ / "gpt.safetensors", bf);
  EXPECT_EQ(meta, (safetensors_metadata{{"format", "pt"}, {"4.weight", "0.weight"}, {"note", "from a store"}}));
  for (std::size_t i = 0; i < store.parameters().size(); ++i) ASSERT_EQ(store.parameters()[i], bf.parameters()[i]);
  EXPECT_THROW(save_safetensors(dir_ / "x.safetensors", store, {{"4.weight", "mine"}}), std::invalid_argument);
}

// ---- hand-made files for the tiny model: dense<2> (0.weight [2, 2], 0.bias [2]), batch_norm (1.*) ----

struct tensor {
  std::string name, dtype;
  std::vector<std::uint64_t> shape;
  bytes data;
};
template <class U>
bytes raw(std::initializer_list<U> values) {
  bytes b(values.size() * sizeof(U));
  std::memcpy(b.data(), std::data(values), b.size());
  return b;
}
bytes file_of(const std::vector<tensor>& tensors, const std::string& metadata = "") {
  std::string header = "{" + (metadata.empty() ? "" : "\"__metadata__\":" + metadata + ",");
  std::uint64_t at = 0;
  bytes data;
  for (const auto& t : tensors) {
    header += fmt::format(R"("{}":{{"dtype":"{}","shape":[{}],"data_offsets":[{},{}]}},)", t.name, t.dtype,
                          fmt::join(t.shape, ","), at, at + t.data.size());
    at += t.data.size();
    data.insert(data.end(), t.data.begin(), t.data.end());
  }
  header.back() = '}';
  if (tensors.empty() && metadata.empty()) header = "{}";
  bytes out(8 + header.size() + data.size());  // (not by insert: g++ 12 warns of a bound it imagines)
  const std::uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}
std::vector<tensor> tiny_tensors() {
  return {{"0.weight", "F32", {2, 2}, raw<float>({1, 2, 3, 4})},
          {"0.bias", "F32", {2}, raw<float>({5, 6})},
          {"1.weight", "F32", {2}, raw<float>({7, 8})},
          {"1.bias", "F32", {2}, raw<float>({9, 10})},
          {"1.running_mean", "F32", {2}, raw<float>({11, 12})},
          {"1.running_var", "F32", {2}, raw<float>({13, 14})},
          {"1.num_batches_tracked", "I64", {}, raw<std::int64_t>({3})}};
}

/// The tensor values of `p` in state_dict order (parameters, then state).
template <class P>
std::vector<double> values(const P& p) {
  std::vector<double> v;
  for (const auto& t : detail::state_dict_of<typename P::model_type>().tensors) {
    if (t.kind == role::batch_counter) continue;
    const auto from = (t.kind == role::parameter ? p.parameters() : p.state()).subspan(t.offset, t.size);
    v.insert(v.end(), from.begin(), from.end());
  }
  return v;
}

TEST_F(safetensors_file, a_file_written_by_hand_loads_and_the_batch_count_is_optional) {
  auto p = compile<tiny, batch<2>>(1);
  load_safetensors(write("t", file_of(tiny_tensors())), p);
  EXPECT_EQ(values(p), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}));
  auto t = tiny_tensors();
  t.pop_back();
  t.front().data = raw<float>({-1, -2, -3, -4});
  load_safetensors(write("t2", file_of(t)), p);
  EXPECT_EQ(values(p)[0], -1.0);
}

TEST_F(safetensors_file, bf16_and_f16_values_convert_exactly) {
  auto t = tiny_tensors();
  // bf16: 1.5, -0.1015625, 3.0e38-ish (0x7f61), the smallest subnormal (0x0001)
  t[0] = {"0.weight", "BF16", {2, 2}, raw<std::uint16_t>({0x3fc0, 0xbdd0, 0x7f61, 0x0001})};
  // f16: 0.333251953125 (0x3555), -65504 (0xfbff), the smallest subnormal 2^-24 (0x0001), -0 (0x8000)
  t[2] = {"1.weight", "F16", {2}, raw<std::uint16_t>({0x3555, 0xfbff})};
  t[3] = {"1.bias", "F16", {2}, raw<std::uint16_t>({0x0001, 0x8000})};
  auto p = compile<tiny, batch<2>>(1);
  load_safetensors(write("t", file_of(t)), p);
  const auto v = values(p);
  auto bits = [](std::uint32_t b) { return static_cast<double>(std::bit_cast<float>(b)); };
  EXPECT_EQ(v[0], 1.5);
  EXPECT_EQ(v[1], -0.1015625);
  EXPECT_EQ(v[2], bits(0x7f610000u));
  EXPECT_EQ(v[3], bits(0x00010000u));
  EXPECT_EQ(v[6], 0.333251953125);
  EXPECT_EQ(v[7], -65504.0);
  EXPECT_EQ(v[8], 0x1p-24);
  EXPECT_EQ(v[9], 0.0);
  EXPECT_TRUE(std::signbit(v[9]));
}

/// Loads `file` into a fresh tiny program, expecting the `fault` with `text` in
/// its message and the program untouched.
void expect_refused(const std::filesystem::path& file, checkpoint_fault fault, const std::string& text,
                    const safetensors_options& options = {}) {
  auto p = compile<tiny, batch<2>>(9);
  stir_state(p);
  const auto before = values(p);
  try {
    load_safetensors(file, p, options);
    ADD_FAILURE() << "loaded " << file;
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.fault(), fault) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  EXPECT_EQ(values(p), before);
}

TEST_F(safetensors_file, a_file_of_another_model_is_refused_naming_the_tensor_and_nothing_changes) {
  auto t = tiny_tensors();
  t[0].shape = {4};
  expect_refused(write("shape", file_of(t)), checkpoint_fault::other_model,
                 "tensor '0.weight' has shape [4]; this model's is [2, 2]");
  t = tiny_tensors();
  t[1].dtype = "I32";
  expect_refused(write("dtype", file_of(t)), checkpoint_fault::other_model, "tensor '0.bias' is I32");
  t = tiny_tensors();
  t[6] = {"1.num_batches_tracked", "F32", {}, raw<float>({3})};
  expect_refused(write("count", file_of(t)), checkpoint_fault::other_model,
                 "tensor '1.num_batches_tracked' is F32; this model takes I64 (a batch count)");
  t = tiny_tensors();
  t.erase(t.begin() + 4);
  expect_refused(write("missing", file_of(t)), checkpoint_fault::other_model,
                 "lacks 1 of this model's 7 tensors: '1.running_mean'");
  t = tiny_tensors();
  t.push_back({"2.weight", "F32", {1}, raw<float>({1})});
  const auto extra = write("extra", file_of(t));
  expect_refused(extra, checkpoint_fault::other_model, "holds 1 tensor this model does not have: '2.weight'");
  auto p = compile<tiny, batch<2>>(1);
  load_safetensors(extra, p, {.ignore_unknown_tensors = true});
  EXPECT_EQ(values(p)[0], 1.0);
  t = tiny_tensors();
  t[5].data = raw<float>({13, std::numeric_limits<float>::quiet_NaN()});
  expect_refused(write("nan", file_of(t)), checkpoint_fault::out_of_range,
                 "tensor '1.running_var' element 1 is nan");
  t = tiny_tensors();
  t[1] = {"0.bias", "F16", {2}, raw<std::uint16_t>({0x3c00, 0x7c00})};  // 1, +inf
  expect_refused(write("inf", file_of(t)), checkpoint_fault::out_of_range, "tensor '0.bias' element 1 is inf");
  expect_refused(dir_ / "absent.safetensors", checkpoint_fault::missing, "no such file");
}

TEST_F(safetensors_file, a_tied_weights_alias_loads_when_it_holds_the_same_values_only) {
  using chain = model<input<2>, dense<2, no_bias, tied<shared_w>>, dense<2, no_bias, tied<shared_w>>>;
  std::vector<tensor> t{{"0.weight", "F32", {2, 2}, raw<float>({1, 2, 3, 4})},
                        {"1.weight", "BF16", {2, 2}, raw<std::uint16_t>({0x3f80, 0x4000, 0x4040, 0x4080})}};
  auto p = compile<chain, batch<1>>(1);
  load_safetensors(write("same", file_of(t)), p);
  EXPECT_EQ(values(p), (std::vector<double>{1, 2, 3, 4}));
  t[1].data = raw<std::uint16_t>({0x3f80, 0x4000, 0x4040, 0x4000});
  try {
    load_safetensors(write("differ", file_of(t)), p);
    FAIL();
  } catch (const checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor '1.weight' is '0.weight' in this model (a tied weight), but their "
                                         "values differ at element 3 (2 and 4)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
