// A layer of your own defines `saved` but does not list it in provides<...>:
// kiln reads only listed members, so this is an error naming the member.
// expect: kiln::provides<...>: this layer defines an optional member it does not list
// expect: a_layer_lists_in_provides_every_optional_member_it_defines<kiln::layer_at<2, keep_input ?>, kiln::member::saved ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

/// y = x · x, keeping x for the backward pass.
struct keep_input {
  using kiln_layer = void;
  static std::string name() { return "keep_input"; }
  template <kiln::Shape In, std::size_t Position, class Declared = void>
  struct bind : kiln::bound_layer_base<keep_input, In, Position> {
    using output_shape = In;
    using parameters = kiln::param_list<>;
#ifndef KILN_SHOULD_FAIL
    using provides = kiln::provides<kiln::member::saved>;
#endif
    template <std::size_t B>
    static constexpr std::size_t saved = In::size * B;
    template <class Ctx>
    static void forward(const Ctx& c) {
      for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) c.saved[i] = c.x[i], c.y[i] = c.x[i] * c.x[i];
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      if (c.dx)
        for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) c.dx[i] = 2 * c.saved[i] * c.dy[i];
    }
  };
};

using net = kiln::model<kiln::input<4>, kiln::dense<4>, keep_input>;

int main() { return static_cast<int>(net::memory_plan<8>::saved_elements) > 0 ? 0 : 1; }
