// Hand-written Eigen 3.4 training loop: the "zero-cost" reference for kiln.
//
// This is what a careful programmer would write by hand for the benchmark task
// (see BENCHMARKING.md): every matrix is allocated once before the loop, all
// products are `noalias()` GEMMs, nothing is generic. Whatever a library adds
// on top of this is overhead. (Eigen's GEMM itself still mallocs its packing
// workspace on each product; glibc recycles it, and the loop takes no page
// faults.)
//
//   MLP: 784-256-128-10, ReLU, softmax cross-entropy (mean over the batch).
//   CNN: conv 5x5x16 'same' + ReLU + max-pool 2 -> conv 5x5x32 'same' + ReLU +
//        max-pool 2 -> dense 10; convolutions as im2col + one GEMM each.
//   SGD, PyTorch's momentum form: v = 0.9 v + g;  w -= 0.05 v.  Batch 64.
//
// MLP activations are column-major with one column per sample (features x
// batch); the CNN's feature-map layout is described above its code.
// Compile with -O3 -march=native -DNDEBUG. Single-threaded (no -fopenmp).
//
//   kiln_compare_eigen --model mlp|cnn [--warmup 50] [--steps S] [--windows W]
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

#include "compare_common.hpp"

namespace {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using RowVector = Eigen::RowVectorXf;
using ConstMap = Eigen::Map<const Matrix>;

constexpr int B = compare::kBatch;

// He-uniform: U(-sqrt(6 / fan_in), +sqrt(6 / fan_in)).
void he_uniform(Matrix& w, int fan_in, compare::SplitMix64& rng) {
  const float bound = std::sqrt(6.0f / static_cast<float>(fan_in));
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = (2.0f * rng.uniform01() - 1.0f) * bound;
}

// One parameter tensor with its gradient and momentum buffer.
struct Param {
  Matrix w, g, v;
  Param(Eigen::Index rows, Eigen::Index cols) : w(Matrix::Zero(rows, cols)), g(Matrix::Zero(rows, cols)), v(Matrix::Zero(rows, cols)) {}
  // PyTorch's SGD with momentum (dampening 0, no Nesterov): v = m v + g; w -= lr v.
  void sgd_step() {
    v.array() = compare::kMomentum * v.array() + g.array();
    w.array() -= compare::kLearningRate * v.array();
  }
};

// Softmax cross-entropy, mean over the batch. Turns the logits `z` (classes x
// batch) into dL/dz in place and returns the loss. `colmax`/`colsum` are
// preallocated 1 x batch scratch rows.
float softmax_xent_inplace(Matrix& z, const int* labels, RowVector& colmax, RowVector& colsum) {
  const auto batch = z.cols();
  colmax.noalias() = z.colwise().maxCoeff();
  z.array() = (z.array().rowwise() - colmax.array()).exp();  // shifted exponentials
  colsum.noalias() = z.colwise().sum();
  double loss = 0;
  for (Eigen::Index j = 0; j < batch; ++j) {
    // -log softmax(z)_y = log(sum_k exp(z_k - max)) - (z_y - max)
    loss += std::log(colsum(j)) - std::log(z(labels[j], j));
  }
  const float inv_b = 1.0f / static_cast<float>(batch);
  z.array().rowwise() /= colsum.array();  // probabilities
  for (Eigen::Index j = 0; j < batch; ++j) z(labels[j], j) -= 1.0f;
  z *= inv_b;  // d(mean loss)/dz = (p - onehot) / batch
  return static_cast<float>(loss) * inv_b;
}

// ---- MLP ---------------------------------------------------------------------

class Mlp {
 public:
  explicit Mlp(compare::SplitMix64& rng)
      : w1_(256, 784), b1_(256, 1), w2_(128, 256), b2_(128, 1), w3_(10, 128), b3_(10, 1),
        a1_(256, B), a2_(128, B), z3_(10, B), d2_(128, B), d1_(256, B), colmax_(B), colsum_(B) {
    he_uniform(w1_.w, 784, rng);
    he_uniform(w2_.w, 256, rng);
    he_uniform(w3_.w, 128, rng);  // biases start at zero
  }

  // One SGD step on a batch: x is 784 x B (column per sample). Returns the loss.
  float step(const ConstMap& x, const int* labels) {
    // Forward. ReLU is applied in place; a > 0 doubles as the backward mask.
    a1_.noalias() = w1_.w * x;
    a1_.colwise() += b1_.w.col(0);
    a1_ = a1_.cwiseMax(0.0f);
    a2_.noalias() = w2_.w * a1_;
    a2_.colwise() += b2_.w.col(0);
    a2_ = a2_.cwiseMax(0.0f);
    z3_.noalias() = w3_.w * a2_;
    z3_.colwise() += b3_.w.col(0);

    const float loss = softmax_xent_inplace(z3_, labels, colmax_, colsum_);  // z3_ now holds dL/dz3

    // Backward: dW = dY X^T, db = row sums of dY, dX = W^T dY masked by ReLU.
    w3_.g.noalias() = z3_ * a2_.transpose();
    b3_.g.noalias() = z3_.rowwise().sum();
    d2_.noalias() = w3_.w.transpose() * z3_;
    d2_.array() *= (a2_.array() > 0.0f).cast<float>();
    w2_.g.noalias() = d2_ * a1_.transpose();
    b2_.g.noalias() = d2_.rowwise().sum();
    d1_.noalias() = w2_.w.transpose() * d2_;
    d1_.array() *= (a1_.array() > 0.0f).cast<float>();
    w1_.g.noalias() = d1_ * x.transpose();
    b1_.g.noalias() = d1_.rowwise().sum();

    for (Param* p : {&w1_, &b1_, &w2_, &b2_, &w3_, &b3_}) p->sgd_step();
    return loss;
  }

 private:
  Param w1_, b1_, w2_, b2_, w3_, b3_;
  Matrix a1_, a2_, z3_, d2_, d1_;
  RowVector colmax_, colsum_;
};


// ---- CNN ---------------------------------------------------------------------
//
// Feature maps are channels-last: a C x (B*H*W) column-major matrix whose
// column n*H*W + y*W + x holds the C channels of one pixel. A 5x5 'same'
// convolution is then one GEMM,
//   out (C_out x B*H*W) = W (C_out x 25*C_in) * im2col (25*C_in x B*H*W),
// with im2col row (ky*5 + kx)*C_in + c, so each kernel row of a column is a
// single contiguous copy of 5*C_in floats. The flattened dense input is the
// pooled map read as 1568 x B in (y, x, c) order: a fixed permutation of
// PyTorch's (c, y, x) weights, with no copy.

// im2col for a 5x5 convolution with padding 2, stride 1, on side x side maps.
void im2col5(const float* in, int channels, int side, Matrix& cols) {
  const int run = 5 * channels;  // one kernel row: 5 pixels x C channels
  float* dst = cols.data();
  for (int n = 0; n < B; ++n)
    for (int y = 0; y < side; ++y)
      for (int x = 0; x < side; ++x)
        for (int ky = 0; ky < 5; ++ky, dst += run) {
          const int sy = y + ky - 2;
          if (sy < 0 || sy >= side) {
            std::fill(dst, dst + run, 0.0f);
            continue;
          }
          const float* src = in + (static_cast<std::ptrdiff_t>(n * side + sy) * side + (x - 2)) * channels;
          if (x >= 2 && x + 2 < side) {
            std::copy(src, src + run, dst);
          } else {
            for (int kx = 0; kx < 5; ++kx) {
              const int sx = x + kx - 2;
              float* d = dst + kx * channels;
              if (sx < 0 || sx >= side) std::fill(d, d + channels, 0.0f);
              else std::copy(src + kx * channels, src + (kx + 1) * channels, d);
            }
          }
        }
}

// Adjoint of im2col5: accumulates the column gradients back into the (zeroed)
// input-gradient map.
void col2im5_add(const Matrix& cols, int channels, int side, float* in_grad) {
  const int run = 5 * channels;
  const float* src = cols.data();
  for (int n = 0; n < B; ++n)
    for (int y = 0; y < side; ++y)
      for (int x = 0; x < side; ++x)
        for (int ky = 0; ky < 5; ++ky, src += run) {
          const int sy = y + ky - 2;
          if (sy < 0 || sy >= side) continue;
          float* dst = in_grad + (static_cast<std::ptrdiff_t>(n * side + sy) * side + (x - 2)) * channels;
          if (x >= 2 && x + 2 < side) {
            for (int i = 0; i < run; ++i) dst[i] += src[i];
          } else {
            for (int kx = 0; kx < 5; ++kx) {
              const int sx = x + kx - 2;
              if (sx < 0 || sx >= side) continue;
              for (int c = 0; c < channels; ++c) dst[kx * channels + c] += src[kx * channels + c];
            }
          }
        }
}

// 2x2 max-pool, stride 2, channels-last. Records the flat input index of each
// maximum (the first one on ties) for the backward pass.
void maxpool2(const Matrix& in, int channels, int side, Matrix& out, std::vector<int>& argmax) {
  const int half = side / 2;
  const float* a = in.data();
  float* o = out.data();
  int* arg = argmax.data();
  for (int n = 0; n < B; ++n)
    for (int oy = 0; oy < half; ++oy)
      for (int ox = 0; ox < half; ++ox) {
        const int p00 = ((n * side + 2 * oy) * side + 2 * ox) * channels;
        const int taps[4] = {p00, p00 + channels, p00 + side * channels, p00 + (side + 1) * channels};
        for (int c = 0; c < channels; ++c, ++o, ++arg) {
          int best = taps[0] + c;
          for (int t = 1; t < 4; ++t)
            if (a[taps[t] + c] > a[best]) best = taps[t] + c;
          *o = a[best];
          *arg = best;
        }
      }
}

// Backward through max-pool and the ReLU before it: the pooled gradient goes to
// the recorded maximum if that activation is positive; everything else is 0.
void maxpool2_relu_backward(const float* g, const std::vector<int>& argmax, const Matrix& relu_out,
                            Matrix& in_grad) {
  in_grad.setZero();
  const float* a = relu_out.data();
  float* d = in_grad.data();
  for (std::size_t i = 0; i < argmax.size(); ++i)
    if (a[argmax[i]] > 0.0f) d[argmax[i]] = g[i];
}

class Cnn {
 public:
  explicit Cnn(compare::SplitMix64& rng)
      : w1_(16, 25), b1_(16, 1), w2_(32, 400), b2_(32, 1), w3_(10, 1568), b3_(10, 1),
        cols1_(25, B * 784), a1_(16, B * 784), p1_(16, B * 196), arg1_(16 * B * 196),
        cols2_(400, B * 196), a2_(32, B * 196), p2_(32, B * 49), arg2_(32 * B * 49), z3_(10, B),
        dflat_(1568, B), da2_(32, B * 196), dp1_(16, B * 196), da1_(16, B * 784), colmax_(B), colsum_(B) {
    he_uniform(w1_.w, 25, rng);
    he_uniform(w2_.w, 400, rng);
    he_uniform(w3_.w, 1568, rng);  // biases start at zero
  }

  // One SGD step on a batch: x is 784 x B (one image per column), which is
  // also the 1 x (B*28*28) channels-last input map.
  float step(const ConstMap& x, const int* labels) {
    // conv1 + ReLU + pool: 1x28x28 -> 16x28x28 -> 16x14x14
    im2col5(x.data(), 1, 28, cols1_);
    a1_.noalias() = w1_.w * cols1_;
    a1_.colwise() += b1_.w.col(0);
    a1_ = a1_.cwiseMax(0.0f);
    maxpool2(a1_, 16, 28, p1_, arg1_);
    // conv2 + ReLU + pool: 16x14x14 -> 32x14x14 -> 32x7x7
    im2col5(p1_.data(), 16, 14, cols2_);
    a2_.noalias() = w2_.w * cols2_;
    a2_.colwise() += b2_.w.col(0);
    a2_ = a2_.cwiseMax(0.0f);
    maxpool2(a2_, 32, 14, p2_, arg2_);
    // dense 1568 -> 10
    const ConstMap flat(p2_.data(), 1568, B);
    z3_.noalias() = w3_.w * flat;
    z3_.colwise() += b3_.w.col(0);

    const float loss = softmax_xent_inplace(z3_, labels, colmax_, colsum_);  // z3_ now holds dL/dz3

    // dense
    w3_.g.noalias() = z3_ * flat.transpose();
    b3_.g.noalias() = z3_.rowwise().sum();
    dflat_.noalias() = w3_.w.transpose() * z3_;  // = dL/dp2, same memory layout as p2_
    // pool2 + ReLU2, conv2 (its im2col buffer is reused for the column gradients
    // once dW2 has consumed it)
    maxpool2_relu_backward(dflat_.data(), arg2_, a2_, da2_);
    w2_.g.noalias() = da2_ * cols2_.transpose();
    b2_.g.noalias() = da2_.rowwise().sum();
    cols2_.noalias() = w2_.w.transpose() * da2_;
    dp1_.setZero();
    col2im5_add(cols2_, 16, 14, dp1_.data());
    // pool1 + ReLU1, conv1 (no gradient w.r.t. the images)
    maxpool2_relu_backward(dp1_.data(), arg1_, a1_, da1_);
    w1_.g.noalias() = da1_ * cols1_.transpose();
    b1_.g.noalias() = da1_.rowwise().sum();

    for (Param* p : {&w1_, &b1_, &w2_, &b2_, &w3_, &b3_}) p->sgd_step();
    return loss;
  }

 private:
  Param w1_, b1_, w2_, b2_, w3_, b3_;
  Matrix cols1_, a1_, p1_;
  std::vector<int> arg1_;
  Matrix cols2_, a2_, p2_;
  std::vector<int> arg2_;
  Matrix z3_, dflat_, da2_, dp1_, da1_;
  RowVector colmax_, colsum_;
};

// ---- driver ------------------------------------------------------------------

template <class Net>
void run(const compare::Args& args, const std::vector<float>& xs, const std::vector<int>& ys, int num_batches) {
  compare::SplitMix64 init_rng(1);
  Net net(init_rng);
  long k = 0;  // global step counter; batch k % num_batches
  auto step = [&] {
    const auto i = static_cast<std::size_t>(k++ % num_batches);
    const ConstMap x(xs.data() + i * B * compare::kPixels, compare::kPixels, B);
    return net.step(x, ys.data() + i * B);
  };

  const auto [samples_per_s, final_loss] = compare::timed_windows(args, step);
  // final_loss: mean training-batch loss over the last timed window.
  compare::print_report("eigen", args, samples_per_s, final_loss);
}

}  // namespace

int main(int argc, char** argv) try {
  const compare::Args args = compare::parse_args(argc, argv, /*with_driver=*/false);
  const compare::Dataset data = compare::load_fashion_mnist_train();
  const std::vector<int> perm = compare::shuffled_indices(data.n);

  // Gather the shuffled set once, so batch i is the contiguous columns
  // [64 i, 64 i + 64) of a 784 x (937*64) matrix. The partial last batch is dropped.
  const int num_batches = data.n / B;
  std::vector<float> xs(static_cast<std::size_t>(num_batches) * B * compare::kPixels);
  std::vector<int> ys(static_cast<std::size_t>(num_batches) * B);
  for (std::size_t j = 0; j < ys.size(); ++j) {
    const auto src = static_cast<std::size_t>(perm[j]);
    std::copy_n(data.images.begin() + static_cast<std::ptrdiff_t>(src * compare::kPixels), compare::kPixels,
                xs.begin() + static_cast<std::ptrdiff_t>(j * compare::kPixels));
    ys[j] = data.labels[src];
  }

  if (args.model == "mlp") run<Mlp>(args, xs, ys, num_batches);
  else run<Cnn>(args, xs, ys, num_batches);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
