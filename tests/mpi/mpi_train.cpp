// Trains one small model and writes its final parameters to argv[1].
// Built twice: with kiln::mpi (run as `mpirun -np 2`, one replica per rank)
// and without MPI (one process, replicate<2>). Both shard every step the
// same way over two workers, so their parameters must be identical.
#include <kiln/kiln.hpp>

#include <cstdio>
#include <fstream>

using namespace kiln;
using net = model<input<6>, dense<16>, relu, dense<3>>;
#if defined(KILN_WITH_MPI)
using replicas = replicate<1>;
#else
using replicas = replicate<2>;
#endif

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  dataset d;
  d.name = "blobs";
  d.sample_shape = {6};
  rng g(1);
  for (std::size_t i = 0; i < 300; ++i) {
    const auto c = static_cast<std::uint32_t>(i % 3);
    for (std::size_t k = 0; k < 6; ++k) d.features.push_back(static_cast<float>((k == c ? 2.0 : 0.0) + g.normal()));
    d.labels.push_back(c);
  }
  auto p = compile<net, batch<8>, replicas>(7);
  trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f}};
  t.fit(d, epochs{3}, {.seed = 5, .progress = progress_mode::lines});
  const auto params = p.parameters();
  if (!distributed::all_equal(std::span<const float>(params))) {
    std::fprintf(stderr, "rank %d: parameters differ between ranks\n", distributed::rank());
    return 1;
  }
  if (distributed::is_primary()) {
    std::ofstream(argv[1], std::ios::binary)
        .write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size_bytes()));
    std::printf("ranks %d, replicas per rank %zu: wrote %zu parameters\n", distributed::ranks(), decltype(p)::replicas,
                params.size());
  }
  return 0;
}
