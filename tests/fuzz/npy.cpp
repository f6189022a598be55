// libFuzzer target: kiln::npy::read and kiln::npy::load on a .npy file of
// outside bytes (plain or gzip). Anything but kiln::data_error (or a result
// that breaks its invariants) is a finding; sanitizers catch the rest.
#include <kiln/data/npy.hpp>

#include "fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = kiln::fuzz::put(kiln::fuzz::scratch("array.npy"), data, size);
  try {
    const auto a = kiln::npy::read<float>(file);
    std::size_t n = 1;
    for (std::size_t e : a.shape) n *= e;
    if (a.values.size() != n) std::abort();
  } catch (const kiln::data_error& e) {
    if (e.file() != file) std::abort();
  }
  try {
    const kiln::dataset d = kiln::npy::load(file, file);  // the same array as features and labels
    if (d.labels.size() % d.size() != 0) std::abort();
  } catch (const kiln::data_error& e) {
    if (e.file() != file) std::abort();
  } catch (const std::invalid_argument&) {
    // dataset::validate: a shape that makes no samples (checked, not a fault)
  }
  return 0;
}
