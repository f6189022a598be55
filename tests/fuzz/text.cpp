// libFuzzer target: the text reader (read_text, plain or gzip) and
// load_fortunes over a directory holding one fortune file of outside bytes.
#include <kiln/data/text.hpp>

#include "fuzz_support.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool index = [] {  // the .dat file beside it makes f a fortune file
    std::filesystem::create_directories(kiln::fuzz::scratch("fortunes"));
    std::ofstream(kiln::fuzz::scratch("fortunes/f.dat"));
    return true;
  }();
  (void)index;
  const auto file = kiln::fuzz::put(kiln::fuzz::scratch("fortunes/f"), data, size);
  try {
    const std::string text = kiln::read_text(file);
    const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
    if (!gzip && text != std::string(reinterpret_cast<const char*>(data), size)) std::abort();
    if (kiln::load_fortunes(file.parent_path()) != kiln::fortune_text(text)) std::abort();
    const auto tokens = kiln::char_vocabulary::encode(text);
    for (auto t : tokens)
      if (t >= kiln::char_vocabulary::size) std::abort();
  } catch (const kiln::data_error& e) {
    if (e.file() != file) std::abort();
  }
  return 0;
}
