// Fashion-MNIST on every core: the MLP of fashion_mnist_mlp.cpp, trained
// data-parallel with replicate<2>.
//
// Run:  fashion_mnist_replicate [data directory] [epochs]
// Across processes (build against kiln::mpi):  mpirun -np 2 fashion_mnist_replicate
#include <kiln/kiln.hpp>

#include <cstdio>
#include <exception>
#include <string>

using namespace kiln;

using mlp = model<input<28, 28>, flatten, dense<256>, relu, dense<128>, relu, dense<10>>;

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : std::string(fashion_mnist::default_directory);
  const std::size_t n_epochs = argc > 2 ? std::stoul(argv[2]) : 10;
  const fashion_mnist data = fashion_mnist::load(dir, {.normalize = pixel_normalization::standardize});

  // 1. Two replicas, pinned to cores 0 and 1. Each has its own workspace and
  //    gradient buffer and takes 64 samples per step; all read the ONE
  //    parameter buffer, so nothing can drift apart. A step is 128 samples.
  //    (replicate<1, 5> would run one replica on core 5 alone.)
  auto program = compile<mlp, batch<64>, replicate<2>>(/*seed=*/42);
  static_assert(decltype(program)::global_batch == 128);

  // 2. The trainer does not change. Its static sampler gives each replica
  //    (and, under mpirun, each rank's replicas) a disjoint, equal shard of
  //    every epoch's one shuffled order; the gradients are reduced in a fixed
  //    order, so the run is bitwise reproducible whatever the thread timing.
  //    With twice the samples per step, the learning rate doubles.
  trainer t{program, sgd{.lr = 0.02f, .momentum = 0.9f}};
  t.fit(data.train, epochs{n_epochs}, {.validation = &data.test, .seed = 7});

  const evaluation test = t.evaluate(data.test);
  if (distributed::is_primary()) std::printf("test accuracy: %.4f\n", test.accuracy);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fashion_mnist_replicate: %s\n", e.what());
  return 1;
}
