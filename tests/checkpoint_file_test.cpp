// Checkpoint files from outside: the checksum judged before anything else,
// values out of range refused, every truncation and bit flip of a small file
// named, saves through symbolic links, stale temporaries and rotation across
// runs. A stand-in program keeps this free of model compilation.
#include <kiln/checkpoint.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "support/fake_program.hpp"
#include "support/files.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace {
namespace fs = std::filesystem;
using kiln::checkpoint_error;
using kiln::checkpoint_fault;
using kiln::training_position;
using kiln::testing::bytes;
using program = kiln::testing::fake_program<float>;

class checkpoint_file : public kiln::testing::file_test {
 protected:
  /// A small checkpoint: 8 parameters, 2 state values, 3 optimizer scalars.
  fs::path save(const std::string& name, const training_position& at = {3, 40, 9, {1, 2, 3, 4}}) {
    const auto p = dir_ / name;
    const std::vector<float> velocity{0.5f, -0.25f, 2.0f};
    kiln::save_checkpoint(p, program::filled(1.0f), std::span<const float>(velocity), "sgd", at);
    return p;
  }
  /// Loading `p` throws `fault`, names `p` and `words`, and changes nothing.
  void expect_refused(const fs::path& p, checkpoint_fault fault, const std::string& words) {
    auto q = program::filled(7.0f);
    std::vector<float> v(3, 9.0f);
    const std::string m = kiln::testing::error_of<checkpoint_error>(
        [&] {
          try {
            kiln::load_checkpoint(p, q, std::span<float>(v), "sgd");
          } catch (const checkpoint_error& e) {
            EXPECT_EQ(e.fault(), fault) << e.what();
            throw;
          }
        },
        p);
    EXPECT_NE(m.find(words), std::string::npos) << m;
    EXPECT_EQ(q.params, program::filled(7.0f).params);
    EXPECT_EQ(v, std::vector<float>(3, 9.0f));
  }
  /// `b` with its trailing CRC-32 recomputed: intact as far as the checksum can tell.
  static bytes resealed(bytes b) {
    const std::uint32_t crc = kiln::detail::crc32_of(std::span<const unsigned char>(b).first(b.size() - 4));
    std::memcpy(b.data() + b.size() - 4, &crc, 4);
    return b;
  }
  /// Where the training position starts in a file saved by save().
  static std::size_t position_at(const bytes& b) {
    std::uint64_t signature;
    std::memcpy(&signature, b.data() + 16, 8);
    return 16 + 8 + signature + 3 * 8 + 8 + 3;  // counts, then "sgd"
  }
};

TEST_F(checkpoint_file, round_trips_through_the_stand_in) {
  const auto p = save("a.kiln");
  auto q = program::filled(0.0f);
  std::vector<float> v(3);
  const auto at = kiln::load_checkpoint(p, q, std::span<float>(v), "sgd");
  const auto want = program::filled(1.0f).params;
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + 6, q.params.begin()));  // (6, 7: alignment padding)
  EXPECT_TRUE(std::equal(want.begin() + 8, want.begin() + 10, q.params.begin() + 8));
  EXPECT_EQ(q.running, program::filled(1.0f).running);
  EXPECT_EQ(v, (std::vector<float>{0.5f, -0.25f, 2.0f}));
  EXPECT_EQ(at.step, 40u);
}

TEST_F(checkpoint_file, damage_is_reported_as_damage_before_the_version_is_read) {
  bytes b = read(save("good.kiln"));
  b[8] = 4;  // the format version, without resealing: a damaged file, not a newer one
  expect_refused(write("flipped_version.kiln", b), checkpoint_fault::corrupted,
                 "corrupted: the checksum does not match");
  expect_refused(write("newer.kiln", resealed(b)), checkpoint_fault::newer_format, "format version 4 is newer");
}

// Formats 1 and 2 carried a signature of type names as the compiler spelt
// them: this kiln cannot check them against a model, and says so.
TEST_F(checkpoint_file, files_of_earlier_formats_are_refused_saying_why) {
  bytes b = read(save("good.kiln"));
  for (const int version : {1, 2}) {
    b[8] = static_cast<unsigned char>(version);
    expect_refused(write("old.kiln", resealed(b)), checkpoint_fault::older_format,
                   fmt::format("format version {} was written by an earlier kiln, whose model signature held type "
                               "names as the compiler spells them; this kiln reads format 3",
                               version));
  }
}

// A signature that differs is named by its first differing line, whichever
// side has it, printable and cut short.
TEST_F(checkpoint_file, another_models_file_is_refused_at_the_first_line_that_differs) {
  bytes b = read(save("good.kiln"));
  const std::string sig = program::model_type::signature();
  const auto w = std::search(b.begin(), b.end(), sig.begin(), sig.end()) - b.begin() + sig.find("shape<2, 3>");
  b[static_cast<std::size_t>(w) + 6] = '3', b[static_cast<std::size_t>(w) + 9] = '2';  // shape<3, 2>
  expect_refused(write("other.kiln", resealed(b)), checkpoint_fault::other_model,
                 "written for another model: the file has \"param w shape<3, 2>\" where this model has \"param w "
                 "shape<2, 3>\" (line 2 of the signature)");
  using kiln::detail::first_difference;
  EXPECT_EQ(first_difference("a\nb\n", "a\nb\nc\n"),
            "the file's signature ends where this model has \"c\" (line 3 of the signature)");
  EXPECT_EQ(first_difference("a\nb\nc\n", "a\nb\n"),
            "the file has \"c\" where this model's signature ends (line 3 of the signature)");
  EXPECT_EQ(first_difference(std::string("x\x01\"\\y\n", 6), "x\n"),
            "the file has \"x\\x01\\x22\\x5cy\" where this model has \"x\" (line 1 of the signature)");
  EXPECT_EQ(first_difference(std::string(500, 'a'), std::string(499, 'a') + "b"),
            fmt::format("the file has \"{}...\" where this model has \"{}...\" (line 1 of the signature)",
                        std::string(200, 'a'), std::string(200, 'a')));
}

TEST_F(checkpoint_file, values_training_cannot_use_are_refused_naming_the_field) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const auto lr = [](double s) { return training_position{3, 40, 9, {}, s}; };
  expect_refused(save("nan.kiln", lr(nan)), checkpoint_fault::out_of_range, "learning-rate scale (lr_scale) is nan");
  expect_refused(save("inf.kiln", lr(inf)), checkpoint_fault::out_of_range, "(lr_scale) is inf");
  expect_refused(save("neg.kiln", lr(-0.5)), checkpoint_fault::out_of_range, "(lr_scale) is -0.5");
  expect_refused(save("best.kiln", {3, 40, 9, {}, 1.0, nan, 0, 1}), checkpoint_fault::out_of_range,
                 "best metric (best_metric) is nan");
  expect_refused(save("has_best.kiln", {3, 40, 9, {}, 1.0, 0.5, 0, 2}), checkpoint_fault::out_of_range,
                 "has_best is 2");
  expect_refused(save("stale.kiln", {3, 40, 9, {}, 1.0, 0.5, 4, 1}), checkpoint_fault::out_of_range,
                 "stale_epochs is 4; it cannot exceed the epochs done (3)");
  expect_refused(save("partial.kiln", {3, 40, 9, {}, 1.0, 0.5, 0, 1, 41}), checkpoint_fault::out_of_range,
                 "step_in_epoch is 41");
  auto bad = program::filled(1.0f);
  bad.params[9] = std::numeric_limits<float>::infinity();  // parameter 7: the second tensor, after padding
  kiln::save_checkpoint(dir_ / "param.kiln", bad);
  auto q = program::filled(7.0f);
  EXPECT_NE(kiln::testing::error_of<checkpoint_error>([&] { kiln::load_checkpoint(dir_ / "param.kiln", q); },
                                                      dir_ / "param.kiln")
                .find("out of range: parameter value 7 is inf"),
            std::string::npos);
  EXPECT_EQ(q.params, program::filled(7.0f).params);
}

TEST_F(checkpoint_file, lengths_beyond_the_file_are_refused_even_when_sealed) {
  bytes b = read(save("good.kiln"));
  const std::uint64_t huge = std::uint64_t{1} << 62;
  std::memcpy(b.data() + 16, &huge, 8);  // the signature's length; sealed, so not a cut: corrupted
  expect_refused(write("sig.kiln", resealed(b)), checkpoint_fault::corrupted,
                 "corrupted: the model signature (4611686018427387904 bytes from byte 24) runs past the end of the "
                 "contents");
  b = read(dir_ / "good.kiln");
  std::uint64_t signature;
  std::memcpy(&signature, b.data() + 16, 8);
  std::memcpy(b.data() + 24 + signature, &huge, 8);  // the parameter count
  expect_refused(write("count.kiln", resealed(b)), checkpoint_fault::corrupted,
                 "announces 4611686018427387904 + 2 + 3");
}

TEST_F(checkpoint_file, every_truncation_is_named_truncated) {
  const bytes b = read(save("good.kiln"));
  for (std::size_t n = 0; n < b.size(); ++n)
    expect_refused(write("cut.kiln", bytes(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n))),
                   checkpoint_fault::truncated, "truncated");
}

TEST_F(checkpoint_file, every_bit_flip_is_named) {
  const bytes b = read(save("good.kiln"));
  for (std::size_t i = 0; i < b.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes f = b;
      f[i] ^= static_cast<unsigned char>(1u << bit);
      const auto p = write("flip.kiln", f);
      if (i < 8) {
        expect_refused(p, checkpoint_fault::not_a_checkpoint, "wrong magic number");
        continue;
      }
      // Every flip breaks the checksum; one in a length field may also make
      // the file look cut short, and is then named truncated.
      auto q = program::filled(7.0f);
      try {
        kiln::load_checkpoint(p, q);
        ADD_FAILURE() << "loaded with byte " << i << " bit " << bit << " flipped";
      } catch (const checkpoint_error& e) {
        EXPECT_EQ(e.file(), p);
        EXPECT_TRUE(e.fault() == checkpoint_fault::corrupted || e.fault() == checkpoint_fault::truncated) << e.what();
        EXPECT_NE(std::string(e.what()).find("checksum does not match"), std::string::npos) << e.what();
      }
      EXPECT_EQ(q.params, program::filled(7.0f).params);
    }
  }
}

TEST_F(checkpoint_file, saving_over_a_symbolic_link_writes_its_target_and_keeps_the_link) {
  fs::create_directories(dir_ / "store");
  const auto target = save("store/real.kiln", {1, 1, 0, {}});
  fs::create_symlink("store/real.kiln", dir_ / "latest.kiln");
  save("latest.kiln", {2, 2, 0, {}});
  EXPECT_TRUE(fs::is_symlink(dir_ / "latest.kiln"));
  EXPECT_EQ(fs::read_symlink(dir_ / "latest.kiln"), "store/real.kiln");
  auto q = program::filled(0.0f);
  EXPECT_EQ(kiln::load_checkpoint(target, q).epoch, 2u);
  EXPECT_EQ(kiln::load_checkpoint(dir_ / "latest.kiln", q).epoch, 2u);
  for (const auto& e : fs::directory_iterator(dir_ / "store")) EXPECT_EQ(e.path().filename(), "real.kiln");
  // A dangling link: the save creates its target.
  fs::create_symlink("store/next.kiln", dir_ / "next.kiln");
  save("next.kiln");
  EXPECT_TRUE(fs::is_symlink(dir_ / "next.kiln"));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "store/next.kiln"));
}

TEST_F(checkpoint_file, a_save_removes_the_temporaries_of_killed_saves_and_nothing_else) {
  const pid_t gone = ::fork();  // a process that has ended: its pid names no running process
  ASSERT_GE(gone, 0);
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const std::string dead = std::to_string(gone), alive = std::to_string(::getppid());
  const bytes partial{'K', 'I', 'L', 'N', 'C', 'K', 'P', 'T', 2, 0};
  write(".epoch-0001.kiln.tmp-" + dead, partial);   // a killed save: removed
  write(".epoch-0002.kiln.tmp-" + dead, {});        // killed before writing: removed
  write(".epoch-0003.kiln.tmp-" + alive, partial);  // a save still running: kept
  write(".notes.txt.tmp-" + dead, {'h', 'i'});      // another program's: kept
  write("epoch-0004.kiln.tmp-" + dead, partial);    // not the pattern: kept
  save("epoch-0005.kiln");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{".epoch-0003.kiln.tmp-" + alive, ".notes.txt.tmp-" + dead,
                                             "epoch-0004.kiln.tmp-" + dead, "epoch-0005.kiln"}));
}

TEST_F(checkpoint_file, a_save_killed_while_writing_leaves_a_temporary_the_next_save_removes) {
  const auto target = save("c.kiln", {1, 1, 0, {}});
  const pid_t child = ::fork();  // killed by SIGXFSZ after 100 bytes of its temporary file
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit limit{100, 100};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    save("c.kiln", {2, 2, 0, {}});
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGXFSZ);
  const auto left = dir_ / kiln::detail::temporary_name(target, child);
  ASSERT_TRUE(fs::exists(left));
  EXPECT_EQ(fs::file_size(left), 100u);
  auto q = program::filled(0.0f);
  EXPECT_EQ(kiln::load_checkpoint(target, q).epoch, 1u);  // the previous checkpoint, whole
  save("c.kiln", {3, 3, 0, {}});
  EXPECT_FALSE(fs::exists(left));
  EXPECT_EQ(kiln::load_checkpoint(target, q).epoch, 3u);
}

TEST_F(checkpoint_file, rotation_keeps_the_newest_by_epoch_whoever_wrote_them) {
  for (const char* name : {"epoch-0001.kiln", "epoch-0002.kiln", "epoch-0010.kiln", "epoch-0011.kiln",
                           "epoch-12345.kiln", "epoch-7.kiln", "notes.kiln", "epoch-0003.kiln.bak"})
    write(name, {1});
  kiln::remove_old_checkpoints(dir_, 2, dir_ / "epoch-0002.kiln");
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"epoch-0002.kiln", "epoch-0003.kiln.bak", "epoch-0011.kiln",
                                             "epoch-12345.kiln", "epoch-7.kiln", "notes.kiln"}));
  EXPECT_EQ(kiln::checkpoint_file_name(7), "epoch-0007.kiln");
  EXPECT_EQ(kiln::checkpoint_epoch_of("epoch-12345.kiln"), 12345u);
}

TEST_F(checkpoint_file, a_directory_that_cannot_be_created_is_named) {
  write("file", {1});
  const auto d = dir_ / "file" / "checkpoints";
  const std::string m =
      kiln::testing::error_of<checkpoint_error>([&] { kiln::detail::create_checkpoint_directory(d); }, d);
  EXPECT_NE(m.find("cannot create the checkpoint directory"), std::string::npos) << m;
}
}  // namespace
