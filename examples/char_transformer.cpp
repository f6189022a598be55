// A small GPT-style transformer language model on the fortunes text: token
// and position embeddings, pre-norm transformer blocks with causal
// self-attention, and an output projection tied to the token embedding.
// Every shape is static: the context length, the heads, the widths, and so
// the attention's memory, are known to the compiler.
//
// Run:  char_transformer [epochs] [stride]   (defaults: 4 epochs, a window every 64 characters)
//       char_transformer --smoke             (a few seconds on a slice of the text)
#include <kiln/kiln.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

using namespace kiln;

constexpr std::size_t context = 64;                   // characters the model sees at once
constexpr std::size_t vocab = char_vocabulary::size;  // 96 characters
constexpr std::size_t width = 64;                     // the residual stream's width
constexpr std::size_t heads = 4;                      // 4 heads of 16

// 1. The model. `chars` ties the embedding to the output projection
//    (logits = h · Eᵀ); the blocks keep shape<64, 64> from end to end.
struct chars;
using gpt = model<input_tokens<context>,                 // shape<64>: token ids
                  embedding<vocab, width, tied<chars>>,  // → shape<64, 64>
                  position_embedding,                    // + a learned vector per position
                  transformer_block<heads>, transformer_block<heads>, transformer_block<heads>,
                  layer_norm,             // the final norm (GPT-2)
                  unembed<tied<chars>>>;  // → shape<64, 96>: next-token scores per position
static_assert(gpt::output_shape == shape<context, vocab>{});

/// Continues `window` by sampling one character at a time (temperature 0.8).
template <class Trained>
std::string sample(const Trained& trained, std::vector<std::uint32_t> window, std::size_t length, std::uint64_t seed) {
  auto one = compile<gpt, batch<1>>(trained.store());  // the trained weights, shared, not copied
  one.set_training(false);
  rng g(seed);
  std::string out;
  for (std::size_t i = 0; i < length; ++i) {
    std::copy(window.end() - context, window.end(), one.input().begin());
    one.forward();
    const auto logits = one.output().subspan((context - 1) * vocab, vocab);  // the last position's scores
    const std::uint32_t pick = sample_token(logits, /*temperature=*/0.8, g);
    window.push_back(pick);
    out += char_vocabulary::character(pick);
  }
  return out;
}

int main(int argc, char** argv) try {
  const bool smoke = argc > 1 && std::strcmp(argv[1], "--smoke") == 0;
  const std::size_t n_epochs = smoke ? 1 : argc > 1 ? std::stoul(argv[1]) : 4;
  const std::size_t stride = smoke ? 32 : argc > 2 ? std::stoul(argv[2]) : 64;

  // 2. Data: every window of 64 characters is labelled with the next
  //    character at each of its 64 positions; the last tenth is held out.
  std::vector<std::uint32_t> tokens = char_vocabulary::encode(load_fortunes());
  if (smoke) tokens.resize(100'000);
  const std::size_t cut = tokens.size() / 10 * 9;
  const std::span<const std::uint32_t> all(tokens);
  const dataset train_set = sequence_dataset(all.first(cut), context, stride, "fortunes train");
  const dataset validation = sequence_dataset(all.subspan(cut), context, context, "fortunes validation");
  std::printf("%zu characters: %zu training windows, %zu validation windows\n%s", tokens.size(), train_set.size(),
              validation.size(), gpt::summary().c_str());

  // 3. Training: AdamW with warm-up then cosine decay, clipped gradients,
  //    one replica per core.
  auto program = compile<gpt, batch<16>, replicate<2>>(/*seed=*/1);  // 32 windows per step
  const std::size_t steps = n_epochs * (train_set.size() / program.global_batch);
  trainer t{program, adamw{.lr = 2e-3f, .weight_decay = 0.01f}};
  for (std::size_t e = 0; e < n_epochs; ++e) {
    t.fit(train_set, epochs{1},
          {.seed = 3,
           .progress = progress_mode::lines,
           .schedule = linear_warmup{.steps = 100} >> cosine{.steps = steps, .floor = 0.1},
           .clip_grad_norm = 1.0});
    const evaluation v = t.evaluate(validation);
    std::printf("epoch %zu: validation perplexity %.3f (next-character accuracy %.3f)\n", e + 1, std::exp(v.loss),
                v.accuracy);
  }
  const double perplexity = std::exp(t.evaluate(validation).loss);
  const std::vector<std::uint32_t> prompt(tokens.begin() + static_cast<std::ptrdiff_t>(cut),
                                          tokens.begin() + static_cast<std::ptrdiff_t>(cut + context));
  std::printf("sample:\n%s%s\n", char_vocabulary::decode(prompt).c_str(), sample(program, prompt, 300, 5).c_str());
  std::printf("validation perplexity: %.3f (%zu parameters)\n", perplexity, gpt::parameter_count);
  // A model that learned nothing has perplexity ~96; the smoke run must beat that clearly.
  return smoke && !(perplexity < 30) ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "char_transformer: %s\n", e.what());
  return 1;
}
