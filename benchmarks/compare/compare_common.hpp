// Shared plumbing for the side-by-side training benchmarks (eigen_train.cpp,
// dlib_train.cpp). Deliberately free of any kiln code: the peers must not
// borrow kiln's data loading or timing.
//
//   * Fashion-MNIST IDX loading (zlib), pixels / 255 as float.
//   * The batch order shared with torch_train.py: a Fisher-Yates shuffle driven
//     by splitmix64 seeded with 0, so every system sees the same batches in the
//     same order. Batches are 64 consecutive entries of that permutation; the
//     trailing partial batch (60000 = 937 * 64 + 32) is dropped, and the 937
//     batches repeat in the same order.
//   * Command-line parsing and the one-line JSON report.
#pragma once

#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace compare {

inline constexpr const char* kDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr int kBatch = 64;
inline constexpr int kImageSide = 28;
inline constexpr int kPixels = kImageSide * kImageSide;
inline constexpr int kClasses = 10;
inline constexpr float kLearningRate = 0.05f;
inline constexpr float kMomentum = 0.9f;

// ---- IDX files ---------------------------------------------------------------

inline std::vector<unsigned char> read_gz(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot open " + path);
  std::vector<unsigned char> out;
  unsigned char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.insert(out.end(), buf, buf + n);
  const bool failed = n < 0;
  gzclose(f);
  if (failed) throw std::runtime_error("gzread failed on " + path);
  return out;
}

inline std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

struct Dataset {
  std::vector<float> images;         // n * 784, row-major per image, pixels / 255
  std::vector<std::uint8_t> labels;  // n
  int n = 0;
};

inline Dataset load_fashion_mnist_train() {
  const auto img = read_gz(std::string(kDataDir) + "/train-images-idx3-ubyte.gz");
  const auto lab = read_gz(std::string(kDataDir) + "/train-labels-idx1-ubyte.gz");
  if (img.size() < 16 || be32(img.data()) != 0x803 || lab.size() < 8 || be32(lab.data()) != 0x801)
    throw std::runtime_error("bad IDX magic");
  const std::uint32_t n = be32(img.data() + 4);
  if (be32(img.data() + 8) != kImageSide || be32(img.data() + 12) != kImageSide || be32(lab.data() + 4) != n ||
      img.size() != 16 + std::size_t{n} * kPixels || lab.size() != 8 + std::size_t{n})
    throw std::runtime_error("unexpected IDX shape");
  Dataset d;
  d.n = static_cast<int>(n);
  d.images.resize(std::size_t{n} * kPixels);
  for (std::size_t i = 0; i < d.images.size(); ++i) d.images[i] = static_cast<float>(img[16 + i]) / 255.0f;
  d.labels.assign(lab.begin() + 8, lab.end());
  return d;
}

// ---- batch order (identical to torch_train.py) -------------------------------

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform-ish float in [0, 1) from the top 24 bits (used for weight init).
  float uniform01() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }

 private:
  std::uint64_t state_;
};

inline std::vector<int> shuffled_indices(int n, std::uint64_t seed = 0) {
  std::vector<int> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  SplitMix64 rng(seed);
  for (int i = n - 1; i > 0; --i) {
    const auto j = static_cast<int>(rng.next() % static_cast<std::uint64_t>(i + 1));
    std::swap(perm[static_cast<std::size_t>(i)], perm[static_cast<std::size_t>(j)]);
  }
  return perm;
}

// ---- the transformer's token windows (identical to torch_train.py) ----------

inline constexpr int kTokenContext = 64;     // examples/char_transformer.cpp's context
inline constexpr int kTokenVocabulary = 96;  // char_vocabulary::size
inline constexpr int kTokenBatch = 32;       // windows per step
inline constexpr int kTokenBatches = 64;     // distinct batches, cycled

// kTokenBatches * kTokenBatch windows of kTokenContext + 1 token ids, each
// splitmix64(seed 0).next() % kTokenVocabulary in order: a window's first
// kTokenContext ids are the input, its last kTokenContext the targets. The
// speed of a step does not depend on the text, so synthetic ids stand in for
// the fortunes file (and need no file).
inline std::vector<std::uint32_t> synthetic_token_windows() {
  std::vector<std::uint32_t> out(static_cast<std::size_t>(kTokenBatches) * kTokenBatch * (kTokenContext + 1));
  SplitMix64 rng(0);
  for (auto& t : out) t = static_cast<std::uint32_t>(rng.next() % kTokenVocabulary);
  return out;
}

// ---- command line ------------------------------------------------------------

struct Args {
  std::string model = "mlp";  // mlp | cnn (| transformer where the caller supports it)
  int threads = 1;
  int warmup = 50;
  int steps = 200;
  int windows = 5;
  std::string driver = "trainer";  // dlib only: trainer | manual
};

[[noreturn]] inline void usage(const char* prog, bool with_driver, const std::string& why) {
  std::fprintf(stderr, "%s: %s\nusage: %s --model mlp|cnn [--threads 1] [--warmup 50] [--steps S] [--windows W]%s\n",
               prog, why.c_str(), prog, with_driver ? " [--driver trainer|manual]" : "");
  std::exit(2);
}

inline Args parse_args(int argc, char** argv, bool with_driver, bool with_transformer = false) {
  Args a;
  auto positive = [&](const char* v) {
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end != '\0' || x <= 0 || x > 100000000) usage(argv[0], with_driver, std::string("bad number ") + v);
    return static_cast<int>(x);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view k = argv[i];
    if (i + 1 >= argc) usage(argv[0], with_driver, "missing value for " + std::string(k));
    const char* v = argv[++i];
    if (k == "--model") a.model = v;
    else if (k == "--threads") a.threads = positive(v);
    else if (k == "--warmup") a.warmup = positive(v);
    else if (k == "--steps") a.steps = positive(v);
    else if (k == "--windows") a.windows = positive(v);
    else if (k == "--driver" && with_driver) a.driver = v;
    else usage(argv[0], with_driver, "unknown option " + std::string(k));
  }
  if (a.model != "mlp" && a.model != "cnn" && !(with_transformer && a.model == "transformer"))
    usage(argv[0], with_driver, with_transformer ? "--model must be mlp, cnn or transformer" : "--model must be mlp or cnn");
  if (a.driver != "trainer" && a.driver != "manual") usage(argv[0], with_driver, "--driver must be trainer or manual");
  // These programs are single-threaded by construction; accept --threads only
  // so that a runner can pass the same flags to every system.
  if (a.threads != 1) usage(argv[0], with_driver, "only --threads 1 is supported");
  return a;
}

// ---- reporting ---------------------------------------------------------------

// BLAS-like shared objects mapped into this process (for the record: dlib
// reaches BLAS through libblas.so.3, i.e. the update-alternatives choice).
inline std::string loaded_blas() {
  std::ifstream maps("/proc/self/maps");
  std::set<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    const auto slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string base = path.substr(path.rfind('/') + 1);
    if (base.rfind("libblas", 0) == 0 || base.rfind("libopenblas", 0) == 0 || base.rfind("libmkl", 0) == 0 ||
        base.rfind("libblis", 0) == 0)
      found.insert(path);
  }
  std::string out;
  for (const auto& p : found) out += (out.empty() ? "" : " + ") + p;
  return out.empty() ? "none" : out;
}

inline std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Warms up, then times args.windows windows of args.steps calls of step()
// (which returns that step's loss and trains on `batch` samples): samples/s
// per window, and the mean loss of the last window.
template <class Step>
std::pair<std::vector<double>, double> timed_windows(const Args& args, Step&& step, int batch = kBatch) {
  for (int s = 0; s < args.warmup; ++s) step();
  std::vector<double> samples_per_s;
  double window_loss = 0;
  for (int w = 0; w < args.windows; ++w) {
    window_loss = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < args.steps; ++s) window_loss += step();
    const auto t1 = std::chrono::steady_clock::now();
    samples_per_s.push_back(static_cast<double>(args.steps) * batch / std::chrono::duration<double>(t1 - t0).count());
  }
  return {samples_per_s, window_loss / args.steps};
}

// Prints the single JSON line the runner parses. `extra` is appended verbatim
// (already formatted as `,"key":value` pairs).
inline void print_report(const std::string& system, const Args& a, const std::vector<double>& samples_per_s,
                         double final_loss, const std::string& extra = "") {
  std::ostringstream o;
  o.precision(10);
  o << "{\"system\":" << json_string(system) << ",\"model\":" << json_string(a.model) << ",\"threads\":" << a.threads
    << ",\"samples_per_s\":[";
  for (std::size_t i = 0; i < samples_per_s.size(); ++i) o << (i ? "," : "") << samples_per_s[i];
  o << "],\"final_loss\":" << final_loss << extra << "}";
  std::printf("%s\n", o.str().c_str());
  std::fflush(stdout);
}

}  // namespace compare
