// Every reader bounds its memory by what the file holds: in a child process
// limited to 512 MiB of address space, headers that announce gigabytes give
// kiln's own errors, never std::bad_alloc.
#include <kiln/checkpoint.hpp>
#include <kiln/data/idx.hpp>
#include <kiln/data/text.hpp>

#include <gtest/gtest.h>

#include "support/fake_program.hpp"
#include "support/files.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define KILN_UNDER_SANITIZER 1
#endif
#endif

namespace {
using kiln::testing::bytes;
using kiln::testing::gzip;
using kiln::testing::idx_file;

class reader_memory : public kiln::testing::file_test {};

TEST_F(reader_memory, hostile_headers_under_a_512_mib_address_space_limit_give_kiln_errors) {
#ifdef KILN_UNDER_SANITIZER
  GTEST_SKIP() << "a sanitizer's shadow memory does not fit under the limit";
#endif
  const auto idx4g = write("4g", idx_file({0xFFFFFFFFu}, {1, 2, 3}));
  const auto idx2p48 = write("2p48", idx_file({0xFFFF, 0xFFFF, 0xFFFF}, {1, 2, 3}));
  const auto gz4g = write("4g.gz", gzip(idx_file({0xFFFFFFFFu}, {1, 2, 3})));
  const auto gz1g = write("1g.gz", gzip(idx_file({0x40000000u}, bytes(1 << 20, 7))));  // 1 GiB, 1 MiB there
  // A checkpoint, sealed, whose signature length and parameter count claim 2^40.
  const auto ckpt = dir_ / "c.kiln";
  kiln::save_checkpoint(ckpt, kiln::testing::fake_program<float>::filled(1.0f));
  bytes b = read(ckpt);
  const std::uint64_t huge = std::uint64_t{1} << 40;
  bytes sig = b, count = b;
  std::memcpy(sig.data() + 16, &huge, 8);
  std::uint64_t signature;
  std::memcpy(&signature, b.data() + 16, 8);
  std::memcpy(count.data() + 24 + signature, &huge, 8);
  for (bytes* f : {&sig, &count}) {
    const std::uint32_t crc = kiln::detail::crc32_of(std::span<const unsigned char>(*f).first(f->size() - 4));
    std::memcpy(f->data() + f->size() - 4, &crc, 4);
  }
  const auto ckpt_sig = write("sig.kiln", sig), ckpt_count = write("count.kiln", count);

  const std::vector<std::function<void()>> readers{
      [&] { kiln::idx::read(idx4g); },
      [&] { kiln::idx::read(idx2p48); },
      [&] { kiln::idx::read(gz4g); },
      [&] { kiln::idx::read(gz1g); },
      [&] {
        auto p = kiln::testing::fake_program<float>{};
        kiln::load_checkpoint(ckpt_sig, p);
      },
      [&] {
        auto p = kiln::testing::fake_program<float>{};
        kiln::load_checkpoint(ckpt_count, p);
      },
  };
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlimit limit{512u << 20, 512u << 20};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(99);
    for (std::size_t i = 0; i < readers.size(); ++i) {
      try {
        readers[i]();
        ::_exit(static_cast<int>(10 + i));  // accepted
      } catch (const kiln::data_error&) {
      } catch (const kiln::checkpoint_error&) {
      } catch (const std::bad_alloc&) {
        ::_exit(static_cast<int>(30 + i));
      } catch (...) {
        ::_exit(static_cast<int>(50 + i));
      }
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child crashed (signal " << WTERMSIG(status) << ")";
  const int code = WEXITSTATUS(status);
  EXPECT_EQ(code, 0) << (code >= 50   ? "another exception from reader "
                         : code >= 30 ? "std::bad_alloc from reader "
                                      : "accepted by reader ")
                     << code % 10;
}
}  // namespace
