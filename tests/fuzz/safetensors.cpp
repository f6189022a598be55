// libFuzzer target: the safetensors reader on outside bytes, into a stand-in
// model (no model compiled): "w" F32 [2, 3] and "b" [2] of a 12-value
// parameter buffer with padding, "m" [2] of state, a batch count "n", and
// "v", an alias of "w" (a tied weight's other name). A refused input must
// leave the buffers as they were; an accepted one must keep the padding.
// Seeds (tests/fuzz/corpus/safetensors): small valid files, F32, BF16, F16,
// with and without the count, the alias and __metadata__.
#include <kiln/safetensors.hpp>

#include <cstdlib>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using role = kiln::detail::state_dict_tensor::role;
  static const kiln::detail::state_dict_layout stand_in{{{"w", {2, 3}, role::parameter, 0, 6},
                                                         {"b", {2}, role::parameter, 8, 2},
                                                         {"m", {2}, role::state, 0, 2},
                                                         {"n", {}, role::batch_counter, 0, 1}},
                                                        {{"v", "w"}}};
  std::vector<float> params(12, -1.0f), state(2, -2.0f);
  for (const bool ignore : {false, true}) {
    try {
      kiln::detail::load_state_dict<float>({data, size}, "fuzz.safetensors", stand_in, params, state,
                                           {.ignore_unknown_tensors = ignore});
      for (const std::size_t pad : {6, 7, 10, 11})
        if (params[pad] != -1.0f) std::abort();  // padding is not the file's
    } catch (const kiln::checkpoint_error&) {
      if (params != std::vector<float>(12, -1.0f) || state != std::vector<float>(2, -2.0f))
        std::abort();  // refused: nothing changed
    }
    params.assign(12, -1.0f);
    state.assign(2, -2.0f);
  }
  return 0;
}
