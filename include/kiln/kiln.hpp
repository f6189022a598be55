// kiln/kiln.hpp — everything kiln offers, in one include.
//
//   #include <kiln/kiln.hpp>
//   using namespace kiln;
//   using mlp = model<input<784>, dense<256>, relu, dense<128>, relu, dense<10>>;
//   auto program = compile<mlp, batch<64>>(/*seed=*/1);
//   trainer t{program, sgd{.lr = 0.05f, .momentum = 0.9f}};
//   t.fit(data.train, epochs{10}, {.validation = &data.test});
#pragma once

#include <kiln/fwd.hpp>  // first: the vocabulary, and the gate to kiln/detail/

#include <kiln/bf16.hpp>
#include <kiln/checkpoint.hpp>
#include <kiln/compile.hpp>
#include <kiln/data/augment.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/data/dataset_view.hpp>
#include <kiln/data/fashion_mnist.hpp>
#include <kiln/data/idx.hpp>
#include <kiln/data/npy.hpp>
#include <kiln/data/sample_source.hpp>
#include <kiln/data/split.hpp>
#include <kiln/data/streamed.hpp>
#include <kiln/data/text.hpp>
#include <kiln/distributed.hpp>
#include <kiln/fit_options.hpp>
#include <kiln/format.hpp>
#include <kiln/gemm.hpp>
#include <kiln/input.hpp>
#include <kiln/layer.hpp>
#include <kiln/layers/attention.hpp>
#include <kiln/layers/batch_norm.hpp>
#include <kiln/layers/conv2d.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/dropout.hpp>
#include <kiln/layers/embedding.hpp>
#include <kiln/layers/flatten.hpp>
#include <kiln/layers/gelu.hpp>
#include <kiln/layers/layer_norm.hpp>
#include <kiln/layers/pool.hpp>
#include <kiln/layers/position_embedding.hpp>
#include <kiln/layers/position_wise.hpp>
#include <kiln/layers/relu.hpp>
#include <kiln/layers/residual.hpp>
#include <kiln/layers/sigmoid.hpp>
#include <kiln/layers/softmax.hpp>
#include <kiln/layers/tanh.hpp>
#include <kiln/layers/transformer_block.hpp>
#include <kiln/layers/unembed.hpp>
#include <kiln/losses/mse.hpp>
#include <kiln/losses/softmax_cross_entropy.hpp>
#include <kiln/metrics.hpp>
#include <kiln/model.hpp>
#include <kiln/options.hpp>
#include <kiln/optim/adam.hpp>
#include <kiln/optim/sgd.hpp>
#include <kiln/parameter_store.hpp>
#include <kiln/program.hpp>
#include <kiln/random.hpp>
#include <kiln/replicate.hpp>
#include <kiln/sampler.hpp>
#include <kiln/schedule.hpp>
#include <kiln/shape.hpp>
#include <kiln/step.hpp>
#include <kiln/tied.hpp>
#include <kiln/trainer.hpp>
