// A fault on one rank ends every rank: run as `mpirun -np 2`. Rank 1's
// forward throws at step 2; both ranks must leave fit with the same
// kiln::distributed::rank_failure (no rank waiting in the step's allreduce:
// the test's timeout catches a hang), with parameters still equal on both.
#include <kiln/kiln.hpp>

#include "../support/blobs.hpp"

#include <cstdio>
#include <stdexcept>
#include <string>

using namespace kiln;

/// y = x, except that rank 1's forward throws at training step 2.
struct fails_on_rank_1 {
  using kiln_layer = void;
  static std::string name() { return "fails_on_rank_1"; }
  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<fails_on_rank_1, In, Position> {
    using output_shape = In;
    using parameters = param_list<>;
    template <class Ctx>
    static void forward(const Ctx& c) {
      if (c.training && c.step == 2 && distributed::rank() == 1)
        throw std::runtime_error("a test fault in rank 1's forward");
      std::copy_n(c.x, In::size * Ctx::batch, c.y);
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      if (c.dx) std::copy_n(c.dy, In::size * Ctx::batch, c.dx);
    }
  };
};

int main() {
  const dataset d = kiln::testing::blobs(300, 1, {6});
  auto p = compile<model<input<6>, dense<16>, fails_on_rank_1, relu, dense<3>>, batch<8>, replicate<1>>(7);
  trainer t{p, sgd{.lr = 0.05f, .momentum = 0.9f}};
  const int me = distributed::rank();
  try {
    t.fit(d, epochs{1}, {.seed = 5, .progress = progress_mode::none});
  } catch (const distributed::rank_failure& e) {
    const std::string what = e.what();
    const bool named = e.failed_rank() == 1 && what.find("rank 1 of 2") != std::string::npos &&
                       what.find("a test fault in rank 1's forward") != std::string::npos;
    const bool equal = distributed::all_equal(std::span<const float>(p.parameters()));
    std::printf("rank %d: %s: %s\n", me, named && equal ? "stopped as expected" : "WRONG", what.c_str());
    if (t.steps_done() != 2) {
      std::printf("rank %d: WRONG: %zu steps done, expected 2\n", me, t.steps_done());
      return 1;
    }
    return named && equal ? 0 : 1;
  }
  std::printf("rank %d: WRONG: fit ended without the fault\n", me);
  return 1;
}
