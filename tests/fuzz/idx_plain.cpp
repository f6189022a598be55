// libFuzzer target: kiln::idx::read on a plain IDX file of outside bytes.
// Anything but kiln::data_error (or a result that breaks the array's
// invariants) is a finding; sanitizers catch the rest.
#include <kiln/data/idx.hpp>

#include "fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) return -1;  // gzip: the idx_gzip target's
  const auto file = kiln::fuzz::put(kiln::fuzz::scratch("plain.idx"), data, size);
  try {
    const auto a = kiln::idx::read(file);
    // Accepted: the header, then exactly the announced elements.
    if (a.data.size() != a.size() || 4 + 4 * a.extents.size() + a.data.size() != size) std::abort();
  } catch (const kiln::data_error& e) {
    if (e.file() != file) std::abort();
  }
  return 0;
}
