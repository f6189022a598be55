// Loads two plugins (build_target_plugin.cpp built for two targets) with
// RTLD_LOCAL and trains a step in each: where the two keep their own kiln
// (hidden visibility; or clang), both train; where they share it (g++,
// default visibility), kiln's check of the targets (detail/build_target.hpp)
// stops the program as the second loads. Exits 0 when both losses are
// finite and agree to 1e-5.
#include <dlfcn.h>

#include <cmath>
#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PLUGIN PLUGIN\n", argv[0]);
    return 2;
  }
  double loss[2] = {};
  for (int i = 0; i < 2; ++i) {
    void* plugin = dlopen(argv[1 + i], RTLD_NOW | RTLD_LOCAL);
    if (plugin == nullptr) {
      std::fprintf(stderr, "cannot load %s: %s\n", argv[1 + i], dlerror());
      return 1;
    }
    const auto run = reinterpret_cast<double (*)()>(dlsym(plugin, "kiln_plugin_loss"));
    if (run == nullptr) {
      std::fprintf(stderr, "%s has no kiln_plugin_loss\n", argv[1 + i]);
      return 1;
    }
    loss[i] = run();
    std::printf("%s: loss %.9g\n", argv[1 + i], loss[i]);
  }
  const bool agree = std::isfinite(loss[0]) && std::isfinite(loss[1]) &&
                     std::fabs(loss[0] - loss[1]) <= 1e-5 * std::fabs(loss[0]);
  return agree ? 0 : 1;
}
