// Damaged and hostile safetensors files (kiln/detail/safetensors_format.hpp):
// every one gives a kiln::checkpoint_error saying what, and the buffers are
// untouched; every cut and every changed byte of a good file too.
#include <kiln/safetensors.hpp>

#include <gtest/gtest.h>

#include "../support/files.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

namespace {
using kiln::checkpoint_error;
using kiln::checkpoint_fault;
using kiln::testing::bytes;
using role = kiln::detail::state_dict_tensor::role;

/// A stand-in model: "w" [2, 3] at 0 and "b" [2] at 8 of a 12-value
/// parameter buffer, "m" [2] of state, a batch count "n", and an alias "v" of "w".
kiln::detail::state_dict_layout stand_in() {
  return {{{"w", {2, 3}, role::parameter, 0, 6},
           {"b", {2}, role::parameter, 8, 2},
           {"m", {2}, role::state, 0, 2},
           {"n", {}, role::batch_counter, 0, 1}},
          {{"v", "w"}}};
}

bytes file(const std::string& header, const bytes& data, std::uint64_t length) {
  bytes out(8 + header.size() + data.size());  // (not by insert: g++ 12 warns of a bound it imagines)
  std::memcpy(out.data(), &length, 8);
  std::copy(header.begin(), header.end(), out.begin() + 8);
  std::copy(data.begin(), data.end(), out.begin() + 8 + static_cast<std::ptrdiff_t>(header.size()));
  return out;
}
bytes file(const std::string& header, const bytes& data = {}) { return file(header, data, header.size()); }

/// A good file of the stand-in: w = 0..5, b = 10, 11, m = 20, 21, n = 1.
bytes good() {
  bytes data;
  auto put = [&](auto v) {
    const auto at = data.size();
    data.resize(at + sizeof v);
    std::memcpy(data.data() + at, &v, sizeof v);
  };
  for (float v : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 10.f, 11.f, 20.f, 21.f}) put(v);
  put(std::int64_t{1});
  return file(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)"
              R"("m":{"dtype":"F32","shape":[2],"data_offsets":[32,40]},)"
              R"("n":{"dtype":"I64","shape":[],"data_offsets":[40,48]}}  )",
              data);
}

struct buffers {
  std::vector<float> params = std::vector<float>(12, -1.0f), state = std::vector<float>(2, -2.0f);
  bool untouched() const {
    return params == std::vector<float>(12, -1.0f) && state == std::vector<float>(2, -2.0f);
  }
};

/// Loads `b`; returns the error's message ("" when it loaded).
std::string load(const bytes& b, buffers& into, checkpoint_fault* fault = nullptr) {
  try {
    kiln::detail::load_state_dict<float>(b, "hostile.safetensors", stand_in(), into.params, into.state);
    return "";
  } catch (const checkpoint_error& e) {
    if (fault) *fault = e.fault();
    EXPECT_TRUE(into.untouched()) << e.what();
    return e.what();
  }
}

TEST(safetensors_reader, a_good_file_loads_into_its_places_and_padding_is_kept) {
  buffers b;
  EXPECT_EQ(load(good(), b), "");
  EXPECT_EQ(b.params, (std::vector<float>{0, 1, 2, 3, 4, 5, -1, -1, 10, 11, -1, -1}));
  EXPECT_EQ(b.state, (std::vector<float>{20, 21}));
}

struct hostile_case {
  const char* what;
  bytes b;
  checkpoint_fault fault;
  const char* says;
};

TEST(safetensors_reader, hostile_headers_are_refused_saying_what) {
  auto tensors = [](const std::string& w) {
    return "{" + w + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)" +
           R"("m":{"dtype":"F32","shape":[2],"data_offsets":[32,40]},)" +
           R"("n":{"dtype":"I64","shape":[],"data_offsets":[40,48]}})";
  };
  const bytes data40(48);
  std::string sixty_four_more;
  for (int i = 0; i < 64; ++i) sixty_four_more += ",1";
  const std::vector<hostile_case> cases{
      {"empty", {}, checkpoint_fault::truncated, "truncated: 0 bytes, fewer than the 8"},
      {"huge length", file("{}", {}, std::uint64_t{1} << 62), checkpoint_fault::not_a_checkpoint,
       "announce a header of 4611686018427387904 bytes, beyond the 100000000"},
      {"length beyond the file", file("{}", {}, 99'999'999), checkpoint_fault::truncated,
       "announces 99999999 bytes of JSON, but 2 bytes follow"},
      {"not an object", file("[1,2]"), checkpoint_fault::not_a_checkpoint, "does not begin with '{'"},
      {"bad json", file(R"({"w":{"dtype":"F32",}})"), checkpoint_fault::corrupted, "not well-formed JSON (at byte"},
      {"bad utf-8", file("{\"w\xff\":{}}"), checkpoint_fault::corrupted, "not well-formed JSON"},
      {"deep nesting", file("{\"w\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
       checkpoint_fault::corrupted, "'w' is an array; each entry of the header is an object"},
      {"entry not an object", file(R"({"w":5})"), checkpoint_fault::corrupted,
       "'w' is the number 5; each entry of the header is an object"},
      {"unknown dtype", file(R"({"w":{"dtype":"F128"}})"), checkpoint_fault::corrupted,
       "tensor 'w': dtype 'F128' is not one the safetensors format defines"},
      {"unknown field", file(R"({"w":{"dtype":"F32","strides":[1]}})"), checkpoint_fault::corrupted,
       "tensor 'w': unknown field 'strides'"},
      {"field twice", file(R"({"w":{"dtype":"F32","dtype":"F32"}})"), checkpoint_fault::corrupted,
       "tensor 'w': field 'dtype' appears twice"},
      {"missing field", file(R"({"w":{"dtype":"F32","shape":[]}})"), checkpoint_fault::corrupted,
       "tensor 'w': lacks its data_offsets"},
      {"name twice",
       file(R"({"w":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[],"data_offsets":[4,8]}})"), checkpoint_fault::corrupted, "the name 'w' appears twice"},
      {"negative", file(R"({"w":{"shape":[-1]}})"), checkpoint_fault::corrupted,
       "tensor 'w': the negative number -1 where 'shape' expects an array of integers"},
      {"fraction", file(R"({"w":{"shape":[1.5]}})"), checkpoint_fault::corrupted, "the number 1.5"},
      {"beyond 2^64", file(R"({"w":{"shape":[18446744073709551616]}})"), checkpoint_fault::corrupted,
       "the number 18446744073709551616"},
      {"three offsets", file(R"({"w":{"data_offsets":[0,1,2]}})"), checkpoint_fault::corrupted,
       "'data_offsets' has more than 2 values"},
      {"one offset", file(R"({"w":{"data_offsets":[0]}})"), checkpoint_fault::corrupted,
       "data_offsets has 1 values, not 2"},
      {"65 dimensions", file(R"({"w":{"shape":[1)" + sixty_four_more + "]}}"), checkpoint_fault::corrupted,
       "'shape' has more than 64 values"},
      {"metadata twice", file(R"({"__metadata__":{},"__metadata__":{}})"), checkpoint_fault::corrupted,
       "the name '__metadata__' appears twice"},
      {"metadata not a string", file(R"({"__metadata__":{"format":1}})"), checkpoint_fault::corrupted,
       "__metadata__ 'format' is the number 1; metadata values are strings"},
      {"metadata nested", file(R"({"__metadata__":{"a":{}}})"), checkpoint_fault::corrupted,
       "__metadata__ 'a' is an object"},
      {"size overflow", file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
       checkpoint_fault::corrupted, "has more bytes than 2^64"},
      {"size mismatch", file(tensors(R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})"), data40),
       checkpoint_fault::corrupted, "tensor 'w' (F32 [2, 3]: 24 bytes) has data_offsets [0, 20]"},
      {"overlap",
       file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]}})",
            bytes(24)),
       checkpoint_fault::corrupted, "tensor 'b' (bytes 16 to 24) overlaps tensor 'w' (bytes 0 to 24)"},
      {"hole", file(tensors(R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[48,72]})"), bytes(72)),
       checkpoint_fault::corrupted, "bytes 0 to 24 of the data belong to no tensor (before tensor 'b')"},
      {"left over", file(tensors(R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"), bytes(50)),
       checkpoint_fault::corrupted, "2 bytes after the last tensor's data belong to no tensor"},
      {"data cut", file(tensors(R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"), bytes(47)),
       checkpoint_fault::truncated, "tensor 'n' ends at byte 48 of the data, but the file holds 47"},
      {"printable names", file("{\"w\\u0001'\":5}"), checkpoint_fault::corrupted, "'w\\x01\\x27' is the number 5"},
  };
  for (const auto& c : cases) {
    buffers b;
    checkpoint_fault fault{};
    const std::string message = load(c.b, b, &fault);
    EXPECT_EQ(fault, c.fault) << c.what << ": " << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << c.what << ": " << message;
    EXPECT_NE(message.find("kiln: checkpoint hostile.safetensors: "), std::string::npos) << c.what << ": " << message;
  }
}

TEST(safetensors_reader, every_cut_of_a_good_file_is_refused_and_changes_nothing) {
  const bytes g = good();
  for (std::size_t n = 0; n < g.size(); ++n) {
    buffers b;
    checkpoint_fault fault{};
    const std::string message = load(bytes(g.begin(), g.begin() + static_cast<std::ptrdiff_t>(n)), b, &fault);
    EXPECT_FALSE(message.empty()) << n;
    EXPECT_TRUE(fault == checkpoint_fault::truncated || fault == checkpoint_fault::corrupted) << n << message;
  }
}

TEST(safetensors_reader, every_changed_byte_loads_or_is_refused_and_a_refusal_changes_nothing) {
  const bytes g = good();
  std::size_t refused = 0;
  for (std::size_t i = 0; i < g.size(); ++i)
    for (const unsigned char x : {0x01, 0x20, 0x80, 0xff}) {
      bytes d = g;
      d[i] ^= x;
      buffers b;
      if (!load(d, b).empty()) ++refused;  // (load checks the buffers are untouched when it refuses)
    }
  EXPECT_GT(refused, g.size());  // the header's bytes and most of the length's
}

/// The process's address space now, in bytes (/proc/self/statm's first field, in pages).
std::size_t address_space() {
  std::size_t pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  return pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

TEST(safetensors_reader, a_header_of_300000_tensors_is_read_in_4_times_its_size) {
  if (address_space() > (std::size_t{1} << 40)) GTEST_SKIP() << "a sanitizer's shadow memory is in the way";
  // 300,000 empty tensors: an 18 MB header. Read as events it takes 2.6
  // times that (measured, 46 MB); a JSON tree of it would take 10.6 times.
  std::string header = R"({"__metadata__":{"format":"pt"})";
  for (int i = 0; i < 300'000; ++i)
    header += fmt::format(R"(,"t{}":{{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]}})", i);
  header += "}";
  const bytes b = file(header);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const rlim_t budget = address_space() + 4 * header.size();
    const rlimit limit{budget, budget};
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(99);
    try {
      buffers into;
      kiln::detail::load_state_dict<float>(b, "many.safetensors", stand_in(), into.params, into.state,
                                           {.ignore_unknown_tensors = true});
      ::_exit(10);  // accepted (it lacks the model's tensors)
    } catch (const checkpoint_error& e) {
      ::_exit(std::string(e.what()).find("lacks 3 of this model's 4 tensors") != std::string::npos ? 0 : 20);
    } catch (const std::bad_alloc&) {
      ::_exit(30);
    } catch (...) {
      ::_exit(50);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "the child crashed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: accepted, 20: another error, 30: out of memory, 50: another exception";
}

}  // namespace
