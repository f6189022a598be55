// dlib peer for kiln's side-by-side training benchmarks (Debian libdlib-dev 19.24).
//
// Same task as torch_train.py / eigen_train.cpp: Fashion-MNIST (pixels / 255),
// batch 64, softmax cross-entropy (dlib's loss_multiclass_log, mean over the
// batch), SGD lr 0.05 momentum 0.9, and the same batch order (compare_common.hpp).
//
//   kiln_compare_dlib --model mlp|cnn [--warmup 50] [--steps S] [--windows W]
//                     [--driver trainer|manual]
//
// Run it with OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1: Debian's dlib does its
// dense products through libblas.so.3 (the update-alternatives choice; make
// that OpenBLAS, e.g. LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp).
//
// Two drivers, both fair to show (BENCHMARKING.md):
//   trainer  dnn_trainer::train_one_step(), what dlib users call. It converts
//            the batch to a tensor on the calling thread and hands it through
//            a zero-capacity pipe to the trainer's own thread, which in turn
//            runs the gradient computation and then the update as tasks on a
//            one-thread pool and waits for each. So the conversion of batch
//            k+1 overlaps step k, but every step pays several thread hand-offs.
//            A timed window ends with get_net(), which waits for the trainer
//            thread to finish the window's last step.
//   manual   everything on one thread: batches are converted to tensors before
//            timing (like PyTorch's pre-sliced tensors), and each step is
//            compute_parameter_gradients() (forward, loss, back-propagation)
//            followed by update_parameters() with one sgd solver per layer.
//
// dlib's sgd differs in form from PyTorch's but not in effect: with weight
// decay 0 it does   v = momentum * v - lr * g;   w += v
// where PyTorch does v = momentum * v + g;        w -= lr * v.
// With a constant learning rate the dlib velocity is just -lr times PyTorch's,
// so the weight trajectories are identical (they would differ only if lr
// changed during training). Note sgd's default weight decay is 0.0005, hence
// the explicit sgd(0, 0.9).
//
// Prints one JSON line; beyond the common fields it adds "driver", "blas" (the
// BLAS objects mapped into the process) and "cpu_per_wall" (process CPU time /
// wall time over the timed windows: > 1 means more than one core was busy).
#include <dlib/dnn.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "compare_common.hpp"

namespace {

using namespace dlib;

using mlp_net = loss_multiclass_log<fc<10, relu<fc<128, relu<fc<256, input<matrix<float>>>>>>>>;

// con<N,5,5,1,1> pads by 5/2 = 2 (dlib's default for stride 1), i.e. 'same';
// max_pool<2,2,2,2> has no padding: 28x28 -> 14x14 -> 7x7 (checked at run time).
using cnn_net = loss_multiclass_log<
    fc<10, max_pool<2, 2, 2, 2, relu<con<32, 5, 5, 1, 1, max_pool<2, 2, 2, 2, relu<con<16, 5, 5, 1, 1, input<matrix<float>>>>>>>>>>;

constexpr int B = compare::kBatch;

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// Guard against silently benchmarking a different architecture.
void check_shapes(const mlp_net&) {}
void check_shapes(const cnn_net& net) {
  const tensor& pool2 = net.subnet().subnet().get_output();                    // second max_pool
  const tensor& pool1 = net.subnet().subnet().subnet().subnet().subnet().get_output();  // first max_pool
  if (pool1.k() != 16 || pool1.nr() != 14 || pool1.nc() != 14 || pool2.k() != 32 || pool2.nr() != 7 ||
      pool2.nc() != 7) {
    std::ostringstream o;
    o << "unexpected CNN shapes: pool1 " << pool1.k() << "x" << pool1.nr() << "x" << pool1.nc() << ", pool2 "
      << pool2.k() << "x" << pool2.nr() << "x" << pool2.nc();
    throw std::runtime_error(o.str());
  }
}

struct Data {
  std::vector<matrix<float>> samples;  // shuffled, 937 * 64 images of 28x28
  std::vector<unsigned long> labels;
  int num_batches = 0;
};

struct Timing {
  std::vector<double> samples_per_s;
  double final_loss = 0;  // mean training-batch loss over the last timed window
  double cpu_per_wall = 0;
};

// Times `windows` windows of `steps` calls of step(k), where k is the global
// step index; `sync` is called inside each window after its last step.
template <class Step, class Sync, class WindowLoss>
Timing time_windows(const compare::Args& args, Step&& step, Sync&& sync, WindowLoss&& window_loss) {
  long k = 0;
  for (int s = 0; s < args.warmup; ++s) step(k++);
  sync();
  Timing r;
  double cpu = 0, wall = 0;
  for (int w = 0; w < args.windows; ++w) {
    window_loss.reset();
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < args.steps; ++s) step(k++);
    sync();
    const auto t1 = std::chrono::steady_clock::now();
    cpu += cpu_seconds() - c0;
    const double dt = std::chrono::duration<double>(t1 - t0).count();
    wall += dt;
    r.samples_per_s.push_back(static_cast<double>(args.steps) * B / dt);
  }
  r.final_loss = window_loss.mean();
  r.cpu_per_wall = cpu / wall;
  return r;
}

template <class Net>
Timing run_trainer(const compare::Args& args, const Data& d) {
  Net net;
  dnn_trainer<Net, sgd> trainer(net, sgd(/*weight_decay=*/0.0f, /*momentum=*/compare::kMomentum));
  trainer.be_quiet();
  trainer.set_learning_rate(compare::kLearningRate);
  trainer.set_mini_batch_size(B);
  // No automatic learning-rate schedule: with a shrink factor of 1 the trainer
  // skips its "no progress" test altogether; the huge threshold is belt and braces.
  trainer.set_learning_rate_shrink_factor(1);
  trainer.set_iterations_without_progress_threshold(std::numeric_limits<unsigned long>::max() / 2);

  auto step = [&](long k) {
    const auto i = static_cast<std::ptrdiff_t>(k % d.num_batches) * B;
    trainer.train_one_step(d.samples.begin() + i, d.samples.begin() + i + B, d.labels.begin() + i);
  };
  auto sync = [&] { trainer.get_net(force_flush_to_disk::no); };  // waits until the trainer thread is idle
  struct {
    decltype(trainer)& t;
    void reset() { t.clear_average_loss(); }
    double mean() const { return t.get_average_loss(); }  // running mean since the last reset
  } loss{trainer};

  Timing r = time_windows(args, step, sync, loss);
  check_shapes(trainer.get_net());
  return r;
}

template <class Net>
Timing run_manual(const compare::Args& args, const Data& d) {
  Net net;
  std::vector<sgd> solvers(Net::num_computational_layers, sgd(0.0f, compare::kMomentum));
  std::vector<resizable_tensor> batches(static_cast<std::size_t>(d.num_batches));
  for (int b = 0; b < d.num_batches; ++b)
    net.to_tensor(d.samples.begin() + b * B, d.samples.begin() + (b + 1) * B, batches[static_cast<std::size_t>(b)]);

  struct {
    double sum = 0;
    long n = 0;
    void reset() { sum = 0, n = 0; }
    double mean() const { return sum / static_cast<double>(n); }
  } loss;
  auto step = [&](long k) {
    const auto b = static_cast<std::size_t>(k % d.num_batches);
    loss.sum += net.compute_parameter_gradients(batches[b], d.labels.begin() + static_cast<std::ptrdiff_t>(b) * B);
    net.update_parameters(solvers, compare::kLearningRate);
    ++loss.n;
  };
  Timing r = time_windows(args, step, [] {}, loss);
  check_shapes(net);
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  const compare::Args args = compare::parse_args(argc, argv, /*with_driver=*/true);
  const compare::Dataset raw = compare::load_fashion_mnist_train();
  const std::vector<int> perm = compare::shuffled_indices(raw.n);

  // The shuffled set as dlib samples; the partial last batch is dropped.
  Data d;
  d.num_batches = raw.n / B;
  d.samples.resize(static_cast<std::size_t>(d.num_batches) * B);
  d.labels.resize(d.samples.size());
  for (std::size_t j = 0; j < d.samples.size(); ++j) {
    const auto src = static_cast<std::size_t>(perm[j]);
    d.samples[j].set_size(compare::kImageSide, compare::kImageSide);
    std::copy_n(raw.images.begin() + static_cast<std::ptrdiff_t>(src * compare::kPixels), compare::kPixels,
                &d.samples[j](0, 0));
    d.labels[j] = raw.labels[src];
  }

  Timing r;
  const bool mlp = args.model == "mlp";
  if (args.driver == "trainer") r = mlp ? run_trainer<mlp_net>(args, d) : run_trainer<cnn_net>(args, d);
  else r = mlp ? run_manual<mlp_net>(args, d) : run_manual<cnn_net>(args, d);

  std::ostringstream extra;
  extra << ",\"driver\":" << compare::json_string(args.driver) << ",\"blas\":" << compare::json_string(compare::loaded_blas())
        << ",\"cpu_per_wall\":" << r.cpu_per_wall;
  compare::print_report("dlib", args, r.samples_per_s, r.final_loss, extra.str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
