// libFuzzer target: kiln::csv::read on outside bytes (plain or gzip), with
// a header row or without (the first byte chooses). Anything but
// kiln::data_error (or a result that breaks the dataset's invariants) is a
// finding; sanitizers catch the rest.
#include <kiln/data/csv.hpp>

#include "fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto file = kiln::fuzz::put(kiln::fuzz::scratch("table.csv"), data, size);
  const bool header = size > 0 && (data[0] & 1);
  try {
    const kiln::dataset d = kiln::csv::read(file, {.header = header});
    d.validate();
    if (d.size() == 0 || d.labels.size() != d.size() || d.size() * 2 > size + 1) std::abort();
  } catch (const kiln::data_error& e) {
    if (e.file() != file) std::abort();
  }
  return 0;
}
