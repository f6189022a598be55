// libFuzzer target: kiln::idx::read on gzip input of outside bytes (zlib's
// inflate, trailers, members, the memory bound as data arrives).
#include <kiln/data/idx.hpp>

#include "fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = kiln::fuzz::put(kiln::fuzz::scratch("data.idx.gz"), data, size);
  try {
    const auto a = kiln::idx::read(file);
    if (a.data.size() != a.size()) std::abort();
  } catch (const kiln::data_error& e) {
    if (e.file() != file) std::abort();
  }
  return 0;
}
