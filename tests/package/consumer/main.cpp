#include <kiln/kiln.hpp>

#include <cstdio>

using namespace kiln;
using net = model<input<4>, dense<8>, relu, dense<3>>;
static_assert(net::parameter_count == 4 * 8 + 8 + 8 * 3 + 3);

int main() {
  auto p = compile<net, batch<2>>(1);
  for (auto& x : p.input()) x = 1.0f;
  p.forward();
  const std::uint32_t t[2] = {0, 2};
  const double loss = p.backward(t).loss;
  std::printf("consumer: %s\nloss %.4f\n", net::summary().c_str(), loss);
  return loss > 0 ? 0 : 1;
}
