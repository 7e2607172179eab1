// GGUF: our writer's files read back bit for bit; a file laid out by hand from the format's documentation (as
// another implementation writes it: another alignment, F16 and BF16 tensors, arrays) read as documented; and every
// malformed file refused with what is wrong, never read past its end.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "common/files.h"
#include "io/gguf.h"
#include "test_util.h"

using namespace probekit;
using probekit::gguf::ValueType;

namespace {

// Little-endian bytes of GGUF's pieces, written out by hand as the documentation lays them.
struct Bytes {
  std::string data;
  template <typename T>
  Bytes& put(T value) {
    data.append(reinterpret_cast<const char*>(&value), sizeof(T));
    return *this;
  }
  Bytes& text(const std::string& s) {
    put<uint64_t>(s.size());
    data += s;
    return *this;
  }
  Bytes& pad(size_t alignment) {
    data.resize((data.size() + alignment - 1) / alignment * alignment, '\0');
    return *this;
  }
};

// A file as another writer lays it out: alignment 64, a string array, an F16 tensor [2, 3] then a BF16 one [4].
std::string handmade_file() {
  Bytes b;
  b.data = "GGUF";
  b.put<uint32_t>(3).put<uint64_t>(2).put<uint64_t>(3);
  b.text("general.alignment").put<uint32_t>(4).put<uint32_t>(64);
  b.text("tags").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).text("a").text("bé");
  b.text("controlvector.layer_count").put<uint32_t>(5).put<int32_t>(-7);
  b.text("half").put<uint32_t>(2).put<uint64_t>(3).put<uint64_t>(2).put<uint32_t>(1).put<uint64_t>(0);
  b.text("brain").put<uint32_t>(1).put<uint64_t>(4).put<uint32_t>(30).put<uint64_t>(64);
  b.pad(64);
  // F16: 1, -2, 0.5, 65504, a subnormal 2^-24, -0.
  for (uint16_t h : {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x8000}) b.put<uint16_t>(h);
  b.pad(64);
  for (uint16_t bf : {0x3f80, 0xc040, 0x0000, 0x4120}) b.put<uint16_t>(bf);  // 1, -3, 0, 10
  b.pad(64);
  return b.data;
}

}  // namespace

TEST_CASE("gguf: what we write reads back with the same bits, keys, types and shapes") {
  gguf::File file;
  file.metadata.push_back({"general.architecture", ValueType::kString, false, "controlvector"});
  file.metadata.push_back({"controlvector.layer_count", ValueType::kU32, false, 2});
  file.metadata.push_back({"numbers", ValueType::kI64, true, Json::array({-1, 5})});
  file.tensors.push_back({"direction.1", {5}, {1.5f, -0.0f, 3e-39f, 1e30f, -7.25f}});
  file.tensors.push_back({"direction.3", {2, 3}, {1, 2, 3, 4, 5, 6}});
  testing::TempDir tmp;
  gguf::write_file(tmp.file("v.gguf"), file);
  const std::string bytes = read_file(tmp.file("v.gguf"));
  CHECK(bytes.size() % 32 == 0);  // every tensor padded, the last one too
  const gguf::File back = gguf::read_file(tmp.file("v.gguf"));
  REQUIRE(back.metadata.size() == 3);
  CHECK(back.find("general.architecture")->value == "controlvector");
  CHECK(back.find("controlvector.layer_count")->type == ValueType::kU32);
  CHECK(back.find("numbers")->array);
  CHECK(back.find("numbers")->value == Json::array({-1, 5}));
  REQUIRE(back.tensors.size() == 2);
  for (size_t t = 0; t < 2; ++t) {
    CHECK(back.tensors[t].name == file.tensors[t].name);
    CHECK(back.tensors[t].shape == file.tensors[t].shape);
    CHECK(std::memcmp(back.tensors[t].values.data(), file.tensors[t].values.data(), 4 * file.tensors[t].values.size()) == 0);
  }
  CHECK(gguf::serialize(back) == bytes);
}

TEST_CASE("gguf: a file laid out by another writer (alignment 64, arrays, F16 and BF16 tensors) is read as documented") {
  const gguf::File file = gguf::parse(handmade_file(), "handmade.gguf");
  CHECK(file.find("tags")->value == Json::array({"a", "bé"}));
  CHECK(file.find("controlvector.layer_count")->value == -7);
  REQUIRE(file.tensors.size() == 2);
  CHECK(file.tensors[0].shape == std::vector<int64_t>{2, 3});  // written innermost first: [3, 2]
  CHECK(file.tensors[0].values == std::vector<float>{1.0f, -2.0f, 0.5f, 65504.0f, 5.9604645e-08f, -0.0f});
  CHECK(std::signbit(file.tensors[0].values[5]));
  CHECK(file.tensors[1].values == std::vector<float>{1.0f, -3.0f, 0.0f, 10.0f});
}

TEST_CASE("gguf: a malformed file is refused naming what is wrong, never read past its end") {
  const std::string good = handmade_file();
  auto refused = [](const std::string& bytes, const std::string& expected) {
    CAPTURE(expected);
    CHECK_THROWS_WITH(gguf::parse(bytes, "bad.gguf"), doctest::Contains(expected.c_str()));
  };
  refused("GGML" + good.substr(4), "not a GGUF file");
  refused(good.substr(0, 6), "the version at byte 4 runs past the end of the file");
  for (size_t cut : {size_t{30}, size_t{100}, good.size() - 64 + 7}) refused(good.substr(0, cut), "runs past the end of the file");
  std::string version = good;
  version[4] = 9;
  refused(version, "GGUF version 9");
  std::string huge = good;  // the first key's length, 2^63
  huge[31] = '\x80';
  refused(huge, "metadata key 0 is");
  std::string type = good;  // the F16 tensor's type (1) becomes Q4_0 (2)
  const size_t type_at = good.find("half") + 4 + 4 + 16;
  type[type_at] = 2;
  refused(type, "tensor 'half' has ggml type 2; only F32 (0), F16 (1) and BF16 (30) tensors are read");
  Bytes nested;
  nested.data = "GGUF";
  nested.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1).text("x").put<uint32_t>(9).put<uint32_t>(9);
  refused(nested.data, "is an array of arrays");
  Bytes twice;
  twice.data = "GGUF";
  twice.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(2).text("k").put<uint32_t>(4).put<uint32_t>(1);
  twice.text("k").put<uint32_t>(4).put<uint32_t>(2);
  refused(twice.data, "metadata 'k' appears twice");
  Bytes alignment;
  alignment.data = "GGUF";
  alignment.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1).text("general.alignment").put<uint32_t>(4).put<uint32_t>(48);
  refused(alignment.data, "general.alignment 48 is not a power of two");
  std::string offset = good;  // the BF16 tensor's data offset, far past the end
  offset[good.find("brain") + 5 + 4 + 8 + 4 + 5] = '\x7f';
  refused(offset, "tensor 'brain' (8 bytes at data offset");
}
