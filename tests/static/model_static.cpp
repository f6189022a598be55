// Static checks of kiln/model.hpp and the layers: compiling is passing.
#include <kiln/compile.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/flatten.hpp>
#include <kiln/layers/relu.hpp>
#include <kiln/layers/sigmoid.hpp>
#include <kiln/layers/tanh.hpp>
#include <kiln/losses/mse.hpp>
#include <kiln/model.hpp>

#include <type_traits>

namespace {
using namespace kiln;

// The MLP of the design document.
using mlp = model<input<784>, dense<256>, relu, dense<128>, relu, dense<10>>;
static_assert(mlp::output_shape == shape<10>{});
static_assert(mlp::parameter_count == 235'146);
static_assert(mlp::layer_count == 5);
static_assert(Model<mlp>);

// Each layer's one-line conformance check: binds, and yields the right shape.
static_assert(std::is_same_v<dense<128>::bind<shape<784>, 1>::output_shape, shape<128>>);
static_assert(std::is_same_v<flatten::bind<shape<28, 28>, 1>::output_shape, shape<784>>);
static_assert(std::is_same_v<relu::bind<shape<3, 4>, 1>::output_shape, shape<3, 4>>);
static_assert(std::is_same_v<kiln::tanh::bind<shape<7>, 1>::output_shape, shape<7>>);
static_assert(std::is_same_v<sigmoid::bind<shape<2, 2, 2>, 1>::output_shape, shape<2, 2, 2>>);
static_assert(BoundLayer<dense<4>::bind<shape<3>, 1>> && BoundLayer<flatten::bind<shape<2, 2>, 1>>);
static_assert(Layer<dense<4>> && Layer<relu> && Layer<flatten> && !Layer<int>);

// no_bias drops the bias; flatten is free; images go through flatten.
using image_net = model<input<28, 28>, flatten, dense<32, no_bias>, kiln::tanh, dense<10>, sigmoid>;
static_assert(image_net::parameter_count == 784 * 32 + 32 * 10 + 10);
static_assert(image_net::layer<0>::is_view && !image_net::layer<1>::is_view);

// Parameters: one aligned offset per tag, in model order.
using layout = mlp::parameters;
static_assert(layout::tensor_count == 6);
static_assert(layout::offset<detail::auto_tag<1, 0>> == 0);
static_assert(layout::offset<detail::auto_tag<1, 1>> == 784 * 256);
static_assert(layout::offsets[2] % detail::parameter_alignment == 0);
static_assert(layout::buffer_size >= mlp::parameter_count);

// Initialisation follows the next layer: He before relu, Glorot otherwise.
using params = mlp::parameter_types;
using first_weight = detail::list_at_t<0, params>;
using last_weight = detail::list_at_t<4, params>;
using first_bias = detail::list_at_t<1, params>;
static_assert(first_weight::initializer == static_cast<int>(init::he_normal));
static_assert(first_weight::fan_in == 784 && first_weight::fan_out == 256);
static_assert(last_weight::initializer == static_cast<int>(init::glorot_uniform));
static_assert(first_bias::initializer == static_cast<int>(init::zeros));

// The memory plan is known at compile time.
using plan = mlp::memory_plan<64>;
static_assert(plan::activation_elements == 64 * (784 + 256 + 256 + 128 + 128 + 10));
static_assert(plan::gradient_elements == 2 * 64 * 784);
static_assert(plan::activation_bytes == plan::activation_elements * sizeof(float));
static_assert(mlp::memory_plan<64, double>::activation_bytes == 2 * plan::activation_bytes);
// flatten shares its input's slot: no bytes for its output.
static_assert(image_net::memory_plan<8>::activation_offset[1] == image_net::memory_plan<8>::activation_offset[0]);

// compile<> options.
using p = decltype(compile<mlp, batch<64>>());
static_assert(p::batch_size == 64 && std::is_same_v<p::scalar_type, float>);
static_assert(std::is_same_v<p::loss_type, softmax_cross_entropy<>>);
using q = decltype(compile<image_net, precision<double>, mse, batch<3>>());
static_assert(q::batch_size == 3 && std::is_same_v<q::scalar_type, double> && q::targets_per_sample == 10);
}  // namespace
