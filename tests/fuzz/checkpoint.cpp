// libFuzzer target: the checkpoint loader on outside bytes, into a stand-in
// program (8 parameters, 2 state values, 3 optimizer scalars). Each input is
// loaded as it is (the checksum path) and resealed with its own CRC-32 (so
// the fuzzer also reaches everything the checksum guards).
#include <kiln/checkpoint.hpp>

#include "../support/fake_program.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

namespace {
void load(std::span<const unsigned char> bytes) {
  auto p = kiln::testing::fake_program<float>::filled(3.0f);
  const auto before = p.params;
  std::vector<float> velocity(3, 5.0f);
  try {
    kiln::detail::load_checkpoint_bytes(bytes, "fuzz.kiln", p, std::span<float>(velocity), "sgd");
  } catch (const kiln::checkpoint_error& e) {
    if (p.params != before || velocity != std::vector<float>(3, 5.0f)) std::abort();  // refused: nothing changed
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  load({data, size});
  if (size >= 4) {
    std::vector<unsigned char> sealed(data, data + size);
    const std::uint32_t crc = kiln::detail::crc32_of(std::span<const unsigned char>(sealed).first(size - 4));
    std::memcpy(sealed.data() + size - 4, &crc, 4);
    load(sealed);
  }
  return 0;
}
