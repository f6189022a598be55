// A layer of your own reads a parameter through its context that it does not
// list in `parameters` (here one that another layer owns): kiln hands each
// layer only the parameters it lists, so this is an error naming the tag.
// expect: kiln: a layer reads and writes only the parameters it lists in `parameters`
// expect: a_layer_reaches_only_the_parameters_it_lists<gain, false>
// expect-errors: 1
#include <kiln/kiln.hpp>

#include <string>

struct gain;

/// y = x ⊙ g, g the parameter `gain`.
template <bool Lists>
struct scale {
  using kiln_layer = void;
  static std::string name() { return "scale"; }
  template <kiln::Shape In, std::size_t Position, class Declared = void>
  struct bind : kiln::bound_layer_base<scale, In, Position> {
    using output_shape = In;
    using parameters = std::conditional_t<Lists, kiln::param_list<kiln::param<gain, In, kiln::init::ones>>,
                                          kiln::param_list<>>;
    template <class Ctx>
    static void forward(const Ctx& c) {
      const auto* g = c.template param<gain>();
      for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) c.y[i] = c.x[i] * g[i % In::size];
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      const auto* g = c.template param<gain>();
      auto* dg = c.template grad<gain>();
      for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) {
        dg[i % In::size] += c.dy[i] * c.x[i];
        if (c.dx) c.dx[i] = c.dy[i] * g[i % In::size];
      }
    }
  };
};

#ifdef KILN_SHOULD_FAIL
using net = kiln::model<kiln::input<4>, scale<true>, scale<false>, kiln::dense<2>>;  // the second does not list gain
#else
using net = kiln::model<kiln::input<4>, scale<true>, scale<true>, kiln::dense<2>>;  // both list it: one tied weight
#endif

int main() {
  auto program = kiln::compile<net, kiln::batch<2>>();
  program.forward();
  return static_cast<int>(program.batch_size) - 2;
}
