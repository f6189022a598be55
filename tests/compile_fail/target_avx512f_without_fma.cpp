// A build for AVX-512F without FMA (g++'s `-march=x86-64 -mavx512f`; clang's
// -mavx512f turns FMA on) is rejected once, by kiln's own #error: kiln's
// AVX-512 kernels fuse their multiply-adds. (Eigen rejects it too, unless
// EIGEN_DONT_VECTORIZE keeps Eigen out of it, as here, so that kiln's is
// the error seen.) The valid twin, with FMA, trains a step of an MLP and a
// CNN, f32 and bf16, for AVX-512F alone.
// compiler: GNU
// flags: -march=x86-64 -mavx512f -mfma -DEIGEN_DONT_VECTORIZE
// misuse-flags: -mno-fma
// expect: kiln: a build with AVX-512F needs FMA as well \(add -mfma, or use -march=native or -march=x86-64-v4\)
// expect-errors: 1
#include <kiln/kiln.hpp>

using mlp = kiln::model<kiln::input<20>, kiln::dense<16>, kiln::relu, kiln::dense<3>>;
using cnn = kiln::model<kiln::input<1, 8, 8>, kiln::conv2d<4, 3>, kiln::relu, kiln::flatten, kiln::dense<3>>;

template <class Program>
float one_step(Program& program) {
  const std::vector<unsigned> labels(program.batch_size, 1);
  program.forward();
  return program.backward(labels).loss;
}

int main() {
  auto a = kiln::compile<mlp, kiln::batch<4>>();
  auto b = kiln::compile<cnn, kiln::batch<4>, kiln::precision<kiln::bf16>>();
  return one_step(a) + one_step(b) > 0 ? 0 : 1;
}
