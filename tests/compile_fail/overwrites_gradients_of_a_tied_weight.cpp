// A layer that writes its gradients (overwrites_gradients) must own its
// parameters alone: with a tied tag it would erase the other users' sums.
// expect: kiln: a layer that declares overwrites_gradients writes its parameters' gradients
// expect: a_layer_that_overwrites_gradients_must_own_its_parameters_alone<kiln::layer_at<1, scale_by_shared>, false>
// expect-errors: 1
#include <kiln/kiln.hpp>

#include <string>

struct shared;

/// y = x ⊙ s with s the model's parameter `shared` (a user-written layer).
struct scale_by_shared {
  using kiln_layer = void;
  static std::string name() { return "scale_by_shared"; }
  template <kiln::Shape In, std::size_t Position, class Declared = void>
  struct bind : kiln::bound_layer_base<scale_by_shared, In, Position> {
    using output_shape = In;
    using provides = kiln::provides<kiln::member::overwrites_gradients>;
#ifdef KILN_SHOULD_FAIL
    static constexpr bool overwrites_gradients = true;
#else
    static constexpr bool overwrites_gradients = false;
#endif
    using parameters = kiln::param_list<kiln::param<shared, kiln::shape<In::size>, kiln::init::ones>>;
    template <class Ctx>
    static void forward(const Ctx& c) {
      const auto* s = c.template param<shared>();
      for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) c.y[i] = c.x[i] * s[i % In::size];
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      const auto* s = c.template param<shared>();
      auto* ds = c.template grad<shared>();
      for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) {
        ds[i % In::size] += c.dy[i] * c.x[i];
        if (c.dx) c.dx[i] = c.dy[i] * s[i % In::size];
      }
    }
  };
};

using net = kiln::model<kiln::input<4>, scale_by_shared, kiln::dense<2>>;

int main() {
  auto program = kiln::compile<net, kiln::batch<2>>();
  program.forward();
  return static_cast<int>(program.batch_size) - 2;
}
