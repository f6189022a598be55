// A layer of your own lists `workspace` among its optional members but
// misspells its definition (workspace_size): an error names the member,
// instead of a workspace silently left out of the plan.
// expect: kiln::provides<...>: this layer lists an optional member it does not define
// expect: a_layer_defines_every_optional_member_it_lists_in_provides<kiln::layer_at<1, doubler ?>, kiln::member::workspace ?>
// expect-errors: 1
#include <kiln/kiln.hpp>

/// y = 2x, computed through a borrowed workspace.
struct doubler {
  using kiln_layer = void;
  static std::string name() { return "doubler"; }
  template <kiln::Shape In, std::size_t Position, class Declared = void>
  struct bind : kiln::bound_layer_base<doubler, In, Position> {
    using output_shape = In;
    using parameters = kiln::param_list<>;
    using provides = kiln::provides<kiln::member::workspace>;
#ifdef KILN_SHOULD_FAIL
    template <std::size_t B>
    static constexpr std::size_t workspace_size = In::size * B;
#else
    template <std::size_t B>
    static constexpr std::size_t workspace = In::size * B;
#endif
    template <class Ctx>
    static void forward(const Ctx& c) {
      for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) c.scratch[i] = 2 * c.x[i];
      for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) c.y[i] = c.scratch[i];
    }
    template <class Ctx>
    static void backward(const Ctx& c) {
      if (c.dx)
        for (std::size_t i = 0; i < In::size * Ctx::batch; ++i) c.dx[i] = 2 * c.dy[i];
    }
  };
};

using net = kiln::model<kiln::input<4>, doubler, kiln::dense<2>>;

int main() { return static_cast<int>(net::memory_plan<8>::scratch_elements) > 0 ? 0 : 1; }
