// kiln/layers/flatten.hpp — view a sample as a vector.
//
// WHAT IT COMPUTES   nothing: the output is the input's memory, read as one
//                    vector (row-major, last extent fastest).
// SHAPE CONTRACT     input shape<D...> → output shape<(D × ...)>; no parameters.
// COST               zero: the program gives flatten's output the input's
//                    storage, and its gradient the output gradient's.
// THREAD SAFETY      stateless.
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <cstddef>
#include <string>


#include <kiln/layer.hpp>
#include <kiln/shape.hpp>

namespace kiln {

struct flatten {
  using kiln_layer = void;
  static std::string name() { return "flatten"; }

  template <Shape In, std::size_t Position, class Declared = void>
  struct bind : bound_layer_base<flatten, In, Position> {
    using output_shape = flatten_t<In>;
    static constexpr bool is_view = true;
    using parameters = param_list<>;
  };
};

}  // namespace kiln
