// A plugin that includes kiln, built for x86-64-v3 and for the x86-64
// baseline, with hidden and with default visibility (tests/CMakeLists.txt),
// and loaded in pairs by build_target_host.cpp: whether the two may share
// one program depends on whether they share kiln (detail/build_target.hpp).
#include <kiln/kiln.hpp>

#include "odr_model.hpp"

extern "C" [[gnu::visibility("default")]] double kiln_plugin_loss() { return kiln::odr_test::run(); }
