// What the fuzz targets share: a scratch file of this process's own, since
// the readers under test take paths.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace kiln::fuzz {

/// `name` in a scratch directory of this process (created once).
inline std::filesystem::path scratch(const std::string& name) {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("kiln_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir / name;
}

/// Writes `size` bytes at `data` to `file`, replacing it.
inline std::filesystem::path put(const std::filesystem::path& file, const std::uint8_t* data, std::size_t size) {
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return file;
}

}  // namespace kiln::fuzz
