// A layer of your own reads a state value (a running statistic) it does not
// list in `state`: kiln hands each layer only the state it lists, so this is
// an error naming the tag.
// expect: kiln: a layer reads and writes only the state values it lists in `state`
// expect: a_layer_reaches_only_the_state_it_lists<running_peak, false>
// expect-errors: 1
#include <kiln/kiln.hpp>

#include <algorithm>
#include <string>

struct running_peak;

/// y = x; while training, keeps the largest input value seen (state).
struct track_peak {
  using kiln_layer = void;
  static std::string name() { return "track_peak"; }
  template <kiln::Shape In, std::size_t Position, class Declared = void>
  struct bind : kiln::bound_layer_base<track_peak, In, Position> {
    using output_shape = In;
    using parameters = kiln::param_list<>;
#ifndef KILN_SHOULD_FAIL
    using provides = kiln::provides<kiln::member::state>;
    using state = kiln::param_list<kiln::param<running_peak, kiln::shape<1>, kiln::init::zeros>>;
#endif
    template <class Ctx>
    static void forward(const Ctx& c) {
      std::copy_n(c.x, In::size * Ctx::batch, c.y);
      if (c.training && c.keeps_state) {
        auto* peak = c.template state<running_peak>();
        for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) peak[0] = std::max(peak[0], c.x[i]);
      }
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      if (c.dx) std::copy_n(c.dy, In::size * Ctx::batch, c.dx);
    }
  };
};

using net = kiln::model<kiln::input<4>, track_peak, kiln::dense<2>>;

int main() {
  auto program = kiln::compile<net, kiln::batch<2>>();
  program.forward();
  return static_cast<int>(program.batch_size) - 2;
}
