// The safetensors reader on well-formed and damaged files: every corruption is a clear error, never a crash.
#include <doctest/doctest.h>

#include <cstring>

#include "io/safetensors.h"
#include "test_util.h"

using namespace probekit;
using probekit::testing::TempDir;

namespace {

std::string two_tensor_file() {
  static const float a[6] = {1, 2, 3, 4, 5, 6};
  static const uint16_t b[2] = {0x3f80, 0x4000};  // bf16 1.0, 2.0
  return safetensors::serialize({{"a", safetensors::DType::kF32, {2, 3}, a, sizeof(a)},
                                 {"b", safetensors::DType::kBF16, {2}, b, sizeof(b)}},
                                {{"format", "pt"}});
}

// Builds a file from a hand-written header and `data_bytes` zero bytes of data.
std::string with_header(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

std::string parse_error(const std::string& bytes) {
  try {
    safetensors::parse_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.safetensors");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("expected an error");
  return "";
}

}  // namespace

TEST_CASE("safetensors round trip: names, dtypes, shapes, data and metadata") {
  TempDir dir;
  std::string path = dir.file("x.safetensors");
  probekit::testing::write_text(path, two_tensor_file());
  safetensors::File file(path);
  REQUIRE(file.tensors().size() == 2);
  const auto& a = file.at("a");
  CHECK(a.dtype == safetensors::DType::kF32);
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  float values[6];
  std::memcpy(values, file.data(a), sizeof(values));
  CHECK(values[5] == 6.0f);
  CHECK(file.at("b").nbytes() == 4);
  CHECK(file.metadata().at("format") == "pt");
  CHECK(file.find("missing") == nullptr);
  CHECK_THROWS_WITH_AS(file.at("missing"), doctest::Contains("no tensor named 'missing'"), std::runtime_error);
  // The data section starts 8-byte aligned, as the reference writer makes it.
  std::string bytes = two_tensor_file();
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  CHECK((8 + header_length) % 8 == 0);
}

// The GPU loader reads a tensor of the map from the file at this offset (StagedUpload::upload_from_file).
TEST_CASE("safetensors: a tensor's bytes in the map give its offset in the file, bytes elsewhere none") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  probekit::testing::write_text(path, two_tensor_file());
  safetensors::File file(path);
  const safetensors::TensorInfo& b = file.at("b");
  CHECK(file.offset_of(file.data(b), b.nbytes()) == std::optional<uint64_t>(b.data_begin));
  CHECK(file.offset_of(file.data(b) + 1, 2) == std::optional<uint64_t>(b.data_begin + 1));
  CHECK_FALSE(file.offset_of(file.data(b), b.nbytes() + 1).has_value());  // past the end
  const float elsewhere[2] = {1, 2};
  CHECK_FALSE(file.offset_of(elsewhere, sizeof elsewhere).has_value());
}

TEST_CASE("safetensors: truncated files and header lengths past the end") {
  std::string good = two_tensor_file();
  CHECK_CONTAINS(parse_error(good.substr(0, 5)), "shorter than the 8-byte header length");
  CHECK_CONTAINS(parse_error(good.substr(0, 20)), "runs past the end");
  CHECK_CONTAINS(parse_error(good.substr(0, good.size() - 3)), "outside the");
  std::string huge = good;
  huge[7] = 0x7f;
  CHECK_CONTAINS(parse_error(huge), "exceeds");
}

TEST_CASE("safetensors: inconsistent headers") {
  CHECK_CONTAINS(parse_error(with_header("{not json", 0)), "not valid JSON");
  CHECK_CONTAINS(parse_error(with_header("[1,2]", 0)), "not a JSON object");
  CHECK_CONTAINS(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8)),
                 "span 4 bytes");
  CHECK_CONTAINS(parse_error(with_header(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8)),
                 "unsupported dtype 'Q4'");
  CHECK_CONTAINS(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                         12)),
                 "overlap");
  CHECK_CONTAINS(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
                 "not a non-negative integer");
  CHECK_CONTAINS(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
                 "outside the");
  CHECK_CONTAINS(parse_error(with_header(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", 8)),
                 "too large");
  CHECK_CONTAINS(parse_error(with_header(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8)), "no string 'dtype'");
  CHECK_CONTAINS(parse_error(with_header(R"({"__metadata__":{"k":1}})", 0)), "not a string");
}

TEST_CASE("safetensors: writing refuses data that does not match its shape") {
  float a[3] = {0, 0, 0};
  CHECK_THROWS_AS(safetensors::serialize({{"a", safetensors::DType::kF32, {2, 2}, a, sizeof(a)}}, {}),
                  std::invalid_argument);
}
