// libFuzzer target: kiln::npz (minizip, then the .npy reader) on an archive
// of outside bytes. Anything but kiln::data_error is a finding.
#include <kiln/data/npz.hpp>

#include "fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = kiln::fuzz::put(kiln::fuzz::scratch("arrays.npz"), data, size);
  try {
    for (const auto& name : kiln::npz::names(file)) {
      const auto a = kiln::npz::read<float>(file, name);
      std::size_t n = 1;
      for (std::size_t e : a.shape) n *= e;
      if (a.values.size() != n) std::abort();
    }
  } catch (const kiln::data_error& e) {
    if (e.file() != file) std::abort();
  }
  return 0;
}
