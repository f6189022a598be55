// Checkpoints: exact round trips (ties stored once, restored shared), every
// kind of bad file refused without touching the program, atomic writes, the
// newest K kept (whoever wrote them), and a resumed run equal to an
// uninterrupted one. Damage, hostile files, links and temporaries:
// checkpoint_file_test.cpp.
#include <kiln/kiln.hpp>

#include <gtest/gtest.h>

#include "support/blobs.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;
using namespace kiln;
struct shared_w;
using chain =
    model<input<32>, dense<10, no_bias, tied<shared_w>>, dense<32, no_bias>, dense<10, no_bias, tied<shared_w>>>;
using mlp = model<input<2, 2>, flatten, dense<16>, relu, dense<3>>;

using kiln::testing::blobs;

template <class P>
std::vector<typename P::scalar_type> copy_of(const P& p) {
  return {p.parameters().begin(), p.parameters().end()};
}

class checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_ckpt_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<char> read(const fs::path& f) {
    std::ifstream in(f, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write(const fs::path& f, const std::vector<char>& b) {
    std::ofstream(f, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
  }
  /// Loading `f` fails with `fault` and leaves a program's parameters as they were.
  void expect_refused(const fs::path& f, checkpoint_fault fault, const std::string& words) {
    auto p = compile<chain, batch<2>>(99);
    const auto before = copy_of(p);
    try {
      load_checkpoint(f, p);
      ADD_FAILURE() << "loaded " << f;
    } catch (const checkpoint_error& e) {
      EXPECT_EQ(e.fault(), fault) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
    EXPECT_EQ(before, copy_of(p));
  }
  fs::path dir_;
};

TEST_F(checkpoint, round_trip_is_exact_and_keeps_ties_shared) {
  auto p = compile<chain, batch<4>>(1);
  p.layer_parameter<2>()[7] = 0.125f;
  std::vector<float> velocity(p.parameters().size(), 0.5f);
  save_checkpoint(dir_ / "a.kiln", p, std::span<const float>(velocity), "sgd", {3, 40, 9, {1, 2, 3, 4}});
  // Tied weight stored once: header + 640 parameters (not 960) + 1 velocity buffer + crc.
  EXPECT_LT(fs::file_size(dir_ / "a.kiln"), 640 * 4 + velocity.size() * 4 + 1024);

  auto q = compile<chain, batch<1>>(2);
  std::vector<float> v2(velocity.size());
  const auto at = load_checkpoint(dir_ / "a.kiln", q, std::span<float>(v2), "sgd");
  EXPECT_EQ(copy_of(p), copy_of(q));
  EXPECT_EQ(velocity, v2);
  EXPECT_EQ(at.epoch, 3u);
  EXPECT_EQ(at.step, 40u);
  EXPECT_EQ(at.seed, 9u);
  EXPECT_EQ(at.rng[3], 4u);
  // Restored shared: one storage behind both uses.
  EXPECT_EQ(q.layer_parameter<1>().data(), q.layer_parameter<3>().data());
  q.layer_parameter<1>()[0] = 7.0f;
  EXPECT_EQ(q.layer_parameter<3>()[0], 7.0f);
  EXPECT_EQ(decltype(q)::model_type::parameter_count, 640u);
}

TEST_F(checkpoint, float_and_double_programs_load_each_other) {
  auto f = compile<chain, batch<2>>(3);
  save_checkpoint(dir_ / "f.kiln", f);
  auto d = compile<chain, batch<2>, precision<double>>(4);
  load_checkpoint(dir_ / "f.kiln", d);
  for (std::size_t i = 0; i < f.parameters().size(); ++i) ASSERT_EQ(d.parameters()[i], double{f.parameters()[i]});
  save_checkpoint(dir_ / "d.kiln", d);
  auto f2 = compile<chain, batch<2>>(5);
  load_checkpoint(dir_ / "d.kiln", f2);
  EXPECT_EQ(copy_of(f), copy_of(f2));
}

TEST_F(checkpoint, refuses_every_bad_file_and_changes_nothing) {
  auto p = compile<chain, batch<2>>(1);
  save_checkpoint(dir_ / "good.kiln", p);
  const auto good = read(dir_ / "good.kiln");

  expect_refused(dir_ / "missing.kiln", checkpoint_fault::missing, "no such file");

  write(dir_ / "text.kiln", {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'});
  expect_refused(dir_ / "text.kiln", checkpoint_fault::not_a_checkpoint, "not a kiln checkpoint");

  auto newer = good;
  newer[8] = 4;  // format version, and a checksum to match: a file from a newer kiln
  const std::uint32_t crc = kiln::detail::crc32_of(
      std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(newer.data()), newer.size() - 4));
  std::memcpy(newer.data() + newer.size() - 4, &crc, 4);
  write(dir_ / "newer.kiln", newer);
  expect_refused(dir_ / "newer.kiln", checkpoint_fault::newer_format, "format version 4 is newer");

  write(dir_ / "short.kiln", std::vector<char>(good.begin(), good.end() - 100));
  expect_refused(dir_ / "short.kiln", checkpoint_fault::truncated, "truncated");
  write(dir_ / "header_only.kiln", std::vector<char>(good.begin(), good.begin() + 30));
  expect_refused(dir_ / "header_only.kiln", checkpoint_fault::truncated, "truncated");

  auto flipped = good;
  flipped[flipped.size() - 50] ^= 0x10;  // one bit of a parameter
  write(dir_ / "flipped.kiln", flipped);
  expect_refused(dir_ / "flipped.kiln", checkpoint_fault::corrupted, "checksum");

  auto other = compile<model<input<32>, dense<10, no_bias>, dense<32, no_bias>, dense<10, no_bias>>, batch<2>>(1);
  save_checkpoint(dir_ / "other.kiln", other);
  expect_refused(dir_ / "other.kiln", checkpoint_fault::other_model,
                 "written for another model: the file has \"layer 1 dense<10, no_bias> shape<32> -> shape<10>\" where "
                 "this model has \"layer 1 dense<10, no_bias, tied> shape<32> -> shape<10>\" (line 2 of the "
                 "signature)");
}

TEST_F(checkpoint, an_interrupted_save_leaves_the_previous_checkpoint_whole) {
  auto p = compile<chain, batch<2>>(1);
  save_checkpoint(dir_ / "c.kiln", p);
  const auto before = read(dir_ / "c.kiln");
  // A child process whose writes are cut off after 100 bytes (RLIMIT_FSIZE)
  // tries to overwrite the checkpoint with other parameters.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{100, 100};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    auto q = compile<chain, batch<2>>(2);
    try {
      save_checkpoint(dir_ / "c.kiln", q);
    } catch (const checkpoint_error& e) {
      ::_exit(e.fault() == checkpoint_fault::io ? 0 : 2);
    }
    ::_exit(1);  // the write was not cut off: the test proves nothing
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(before, read(dir_ / "c.kiln"));
  auto r = compile<chain, batch<2>>(3);
  load_checkpoint(dir_ / "c.kiln", r);
  EXPECT_EQ(copy_of(p), copy_of(r));
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename(), "c.kiln");  // no temp left
}

TEST_F(checkpoint, fit_keeps_the_newest_k) {
  auto p = compile<mlp, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  t.fit(blobs(64, 1), epochs{5}, {.progress = progress_mode::none, .checkpoint_dir = dir_, .keep_checkpoints = 2});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"epoch-0004.kiln", "epoch-0005.kiln"}));
}

// 4 epochs straight, versus 2 epochs + save in another process + load + 2 epochs.
TEST_F(checkpoint, resume_in_a_fresh_process_reproduces_the_uninterrupted_run) {
  const dataset train = blobs(200, 2);
  const fit_options o{.seed = 11, .progress = progress_mode::none};
  auto straight = compile<mlp, batch<8>>(5);
  trainer a{straight, sgd{.lr = 0.05f, .momentum = 0.9f}};
  a.fit(train, epochs{4}, o);

  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto first = compile<mlp, batch<8>>(5);
    trainer b{first, sgd{.lr = 0.05f, .momentum = 0.9f}};
    b.fit(train, epochs{2}, o);
    b.save(dir_ / "half.kiln", o.seed);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);

  auto resumed = compile<mlp, batch<8>>(0);  // other initial weights: all come from the file
  trainer c{resumed, sgd{.lr = 0.05f, .momentum = 0.9f}};
  const auto at = c.load(dir_ / "half.kiln");
  EXPECT_EQ(at.epoch, 2u);
  EXPECT_EQ(at.step, 2u * 25);
  const auto history = c.fit(train, epochs{2}, o);
  EXPECT_EQ(history.epochs.front().epoch, 3u);
  EXPECT_EQ(0,
            std::memcmp(straight.parameters().data(), resumed.parameters().data(), straight.parameters().size_bytes()));
}

TEST_F(checkpoint, a_nan_loss_leaves_the_last_checkpoint_intact) {
  dataset d = blobs(16, 1);
  auto p = compile<mlp, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  fit_options o{.shuffle = false, .progress = progress_mode::none, .checkpoint_dir = dir_};
  t.fit(d, epochs{1}, o);
  const auto after_epoch_1 = copy_of(p);
  for (std::size_t i = 8; i < 16; ++i) d.features[i * 4] = std::nanf("");
  EXPECT_THROW(t.fit(d, epochs{1}, o), training_error);
  auto q = compile<mlp, batch<8>>(2);
  load_checkpoint(dir_ / "epoch-0001.kiln", q);
  EXPECT_EQ(after_epoch_1, copy_of(q));
}

// Rows encoded by two models that differ only in their activation: the
// models holding them in a position_wise differ only inside it.
struct rows_relu : model<input<4>, dense<4>, relu> {};
struct rows_tanh : model<input<4>, dense<4>, kiln::tanh> {};

TEST_F(checkpoint, the_layers_inside_position_wise_are_part_of_the_model) {
  using with_relu = model<input<3, 4>, position_wise<rows_relu>, flatten, dense<2>>;
  using with_tanh = model<input<3, 4>, position_wise<rows_tanh>, flatten, dense<2>>;
  EXPECT_NE(with_relu::signature(), with_tanh::signature());
  auto a = compile<with_relu, batch<2>>(1);
  save_checkpoint(dir_ / "relu.kiln", a);
  auto b = compile<with_tanh, batch<2>>(2);
  const auto before = copy_of(b);
  try {
    load_checkpoint(dir_ / "relu.kiln", b);
    ADD_FAILURE() << "a checkpoint of position_wise<rows_relu> loaded into position_wise<rows_tanh>";
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.fault(), checkpoint_fault::other_model) << e.what();
    EXPECT_NE(std::string(e.what()).find("the file has \"layer 3 relu shape<4> -> shape<4>\" where this model has "
                                         "\"layer 3 tanh shape<4> -> shape<4>\""),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(before, copy_of(b));
}

TEST_F(checkpoint, the_optimizer_must_match) {
  auto p = compile<mlp, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  save_checkpoint(dir_ / "bare.kiln", p);  // parameters only
  EXPECT_THROW(t.load(dir_ / "bare.kiln"), checkpoint_error);
}
}  // namespace

namespace {
TEST_F(checkpoint, rotation_keeps_the_newest_of_every_run_and_the_one_just_written) {
  // An earlier run's epochs 10 and 11 outrank this run's: the directory stays
  // at keep_checkpoints + 1 files, and this run's latest is always there.
  for (const char* stale : {"epoch-0010.kiln", "epoch-0011.kiln", "notes.txt"})
    std::ofstream(dir_ / stale) << "old run";
  auto p = compile<mlp, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  t.fit(blobs(64, 1), epochs{3}, {.progress = progress_mode::none, .checkpoint_dir = dir_, .keep_checkpoints = 2});
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"epoch-0003.kiln", "epoch-0010.kiln", "epoch-0011.kiln", "notes.txt"}));
}

TEST_F(checkpoint, a_checkpoint_directory_that_cannot_be_created_is_a_checkpoint_error_naming_it) {
  std::ofstream(dir_ / "file") << "in the way";
  auto p = compile<mlp, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  const auto where = dir_ / "file" / "checkpoints";
  try {
    t.fit(blobs(64, 1), epochs{1}, {.progress = progress_mode::none, .checkpoint_dir = where});
    ADD_FAILURE() << "no error";
  } catch (const checkpoint_error& e) {
    EXPECT_EQ(e.fault(), checkpoint_fault::io);
    EXPECT_EQ(e.file(), where);
    EXPECT_NE(std::string(e.what()).find(where.string() + ": cannot create the checkpoint directory"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(checkpoint, a_continued_run_appends_to_the_metrics_log) {
  auto p = compile<mlp, batch<8>>(1);
  trainer t{p, sgd{.lr = 0.05f}};
  const auto log = dir_ / "m.jsonl";
  t.fit(blobs(64, 1), epochs{2}, {.progress = progress_mode::none, .metrics_log = log});
  t.fit(blobs(64, 1), epochs{1}, {.progress = progress_mode::none, .metrics_log = log});
  std::ifstream in(log);
  std::string line;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2].rfind("{\"epoch\":3,", 0), 0u) << lines[2];
}

TEST_F(checkpoint, a_moved_from_program_takes_a_copy) {
  auto a = compile<mlp, batch<8>>(1);
  auto b = compile<mlp, batch<8>>(2);
  auto c = std::move(a);
  a = b;  // a was moved from
  EXPECT_EQ(copy_of(a), copy_of(b));
  a.forward();
}
}  // namespace
