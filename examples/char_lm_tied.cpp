// A character-level language model on the fortunes corpus, with its input
// embedding and output projection tied — and the same model untied, to compare.
//
// Run:  char_lm_tied [epochs] [stride]      (defaults: 3 epochs, a window every 8 characters)
//       char_lm_tied --smoke                (a few seconds on a slice of the text)
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

using namespace kiln;

constexpr std::size_t context = 32;                   // characters the model sees
constexpr std::size_t vocab = char_vocabulary::size;  // 96 characters
constexpr std::size_t width = 48;                     // embedding width

// 1. The tie is a type. `chars` names the one table that maps characters to
//    vectors (embedding) and vectors back to character scores (unembed:
//    logits = h · Eᵀ). Both layers use the same storage and its gradient
//    is the sum of both uses'.
struct chars;
using tied_lm = model<input_tokens<context>, embedding<vocab, width, tied<chars>>,  // shape<32> → shape<32, 48>
                      flatten, dense<384>, relu,                                    // → shape<384>
                      dense<width>,                                                 // → shape<48>
                      unembed<tied<chars>>>;                                        // → shape<96>: h · Eᵀ

// 2. The untied model learns a separate output matrix of the same shape.
using untied_lm = model<input_tokens<context>, embedding<vocab, width>, flatten, dense<384>, relu, dense<width>,
                        dense<vocab, no_bias>>;

// The difference is exactly one vocab × width table, known to the compiler.
static_assert(untied_lm::parameter_count - tied_lm::parameter_count == vocab * width);

/// Continues `prompt` by sampling from the model, one character at a time.
template <class Model, class Trained>
std::string sample(const Trained& trained, std::vector<std::uint32_t> window, std::size_t length, std::uint64_t seed) {
  // A batch-1 program over the trained program's parameter store: the same
  // weights (ties still tied), nothing copied, one sample per forward.
  auto one = compile<Model, batch<1>>(trained.store());
  rng g(seed);
  std::string out;
  for (std::size_t i = 0; i < length; ++i) {
    std::copy(window.end() - context, window.end(), one.input().begin());
    one.forward();
    const auto logits = one.output();
    const std::uint32_t pick = sample_token(logits, /*temperature=*/0.8, g);
    window.push_back(pick);
    out += char_vocabulary::character(pick);
  }
  return out;
}

template <class Model>
double train(const char* label, const dataset& train_set, const dataset& validation, std::size_t n_epochs,
             const std::vector<std::uint32_t>& prompt) {
  std::printf("\n== %s: %zu parameters\n%s", label, Model::parameter_count, Model::summary().c_str());
  auto program = compile<Model, batch<64>>(/*seed=*/1);
  trainer t{program, sgd{.lr = 0.05f, .momentum = 0.9f, .nesterov = true}};
  for (std::size_t e = 0; e < n_epochs; ++e) {
    t.fit(train_set, epochs{1}, {.seed = 3, .progress = progress_mode::lines});
    const evaluation v = t.evaluate(validation);
    std::printf("%s epoch %zu: validation perplexity %.3f (accuracy %.3f)\n", label, e + 1, std::exp(v.loss),
                v.accuracy);
  }
  const double perplexity = std::exp(t.evaluate(validation).loss);
  std::printf("%s sample:\n%s%s\n", label, char_vocabulary::decode(prompt).c_str(),
              sample<Model>(program, prompt, 300, 5).c_str());
  return perplexity;
}

int main(int argc, char** argv) try {
  const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
  const std::size_t n_epochs = smoke ? 1 : argc > 1 ? std::stoul(argv[1]) : 3;
  const std::size_t stride = smoke ? 4 : argc > 2 ? std::stoul(argv[2]) : 8;

  // 3. Data: the fortunes text as character tokens; the last tenth is held out.
  std::vector<std::uint32_t> tokens = char_vocabulary::encode(load_fortunes());
  if (smoke) tokens.resize(60'000);
  const std::size_t cut = tokens.size() / 10 * 9;
  const std::span<const std::uint32_t> all(tokens);
  const dataset train_set = next_token_dataset(all.first(cut), context, stride, "fortunes train");
  const dataset validation = next_token_dataset(all.subspan(cut), context, context, "fortunes validation");
  std::printf("%zu characters: %zu training windows, %zu validation windows\n", tokens.size(), train_set.size(),
              validation.size());
  const std::vector<std::uint32_t> prompt(tokens.begin() + static_cast<std::ptrdiff_t>(cut),
                                          tokens.begin() + static_cast<std::ptrdiff_t>(cut + context));

  const double tied_ppl = train<tied_lm>("tied", train_set, validation, n_epochs, prompt);
  const double untied_ppl = train<untied_lm>("untied", train_set, validation, n_epochs, prompt);
  std::printf("\nvalidation perplexity: tied %.3f (%zu parameters), untied %.3f (%zu parameters)\n", tied_ppl,
              tied_lm::parameter_count, untied_ppl, untied_lm::parameter_count);
  // A model that learned nothing has perplexity ~vocab (96); the smoke run must beat that clearly.
  return smoke && !(tied_ppl < 30 && untied_ppl < 30) ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "char_lm_tied: %s\n", e.what());
  return 1;
}
