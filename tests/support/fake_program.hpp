// A stand-in for a compiled program, just what save_checkpoint and
// load_checkpoint use (layouts, signature, parameter and state buffers):
// checkpoint files can be tested and fuzzed without compiling a model.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>

namespace kiln::testing {

template <class T = float>
struct fake_program {
  using scalar_type = T;
  struct model_type {
    static std::string signature() { return "fake model\nparam w shape<2, 3>\nparam b shape<2>\n"; }
  };
  struct layout {  // two tensors, with alignment padding between them
    static constexpr std::size_t count = 8, tensor_count = 2, buffer_size = 12;
    static constexpr std::array<std::size_t, 2> offsets{0, 8}, sizes{6, 2};
  };
  struct state_layout {
    static constexpr std::size_t count = 2, tensor_count = 1, buffer_size = 2;
    static constexpr std::array<std::size_t, 1> offsets{0}, sizes{2};
  };
  std::array<T, layout::buffer_size> params{};
  std::array<T, state_layout::buffer_size> running{};

  std::span<T> parameters() noexcept { return params; }
  std::span<const T> parameters() const noexcept { return params; }
  std::span<T> state() noexcept { return running; }
  std::span<const T> state() const noexcept { return running; }

  /// Distinct, exactly representable values.
  static fake_program filled(T base) {
    fake_program p;
    for (std::size_t i = 0; i < p.params.size(); ++i) p.params[i] = base + static_cast<T>(i) / 4;
    for (std::size_t i = 0; i < p.running.size(); ++i) p.running[i] = base - static_cast<T>(i + 1) / 8;
    return p;
  }
};

}  // namespace kiln::testing
