#pragma once
#include <kiln/kiln.hpp>

#include <vector>

namespace kiln::odr_test {
using net = model<input<6>, dense<5>, relu, dense<3>>;
inline double run() {
  auto p = compile<net, batch<2>>(1);
  for (auto& x : p.input()) x = 0.5f;
  p.forward();
  const std::vector<std::uint32_t> t{0, 2};
  return p.backward(t).loss;
}
}  // namespace kiln::odr_test
