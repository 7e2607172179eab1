// A generated row's text as its tokens come: the pieces joined are the row's decode, whatever the tokens.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "inference/text_stream.h"
#include "test_paths.h"
#include "tokenizer/tokenizer.h"

using probekit::inference::TextStream;
using probekit::tokenizer::Tokenizer;

namespace {

// The pieces of `generated` after `prompt`, joined.
std::string streamed(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt, const std::vector<int32_t>& generated) {
  TextStream stream(tokenizer, prompt);
  std::string text;
  for (size_t i = 0; i < generated.size(); ++i) text += stream.add(generated[i], i + 1 == generated.size());
  return text;
}

std::string hex_bytes(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += fmt::format("{:02x}", c);
  return out;
}

std::vector<int32_t> joined(std::vector<int32_t> prompt, const std::vector<int32_t>& generated) {
  prompt.insert(prompt.end(), generated.begin(), generated.end());
  return prompt;
}

}  // namespace

TEST_CASE("text stream: a byte run that turns invalid takes back none of what was shown (ByteFallback)") {
  const Tokenizer tokenizer = Tokenizer::from_file(PROBEKIT_FIXTURES "/models/gemma3_text");
  const std::vector<int32_t> prompt = tokenizer.encode("Say it", true);
  const int32_t bracket = *tokenizer.token_to_id("<0x5B>"), lead = *tokenizer.token_to_id("<0xE6>");
  const std::vector<int32_t> word = tokenizer.encode(" again", false);
  // "[" alone is a character; "[" then a lone lead byte is two invalid bytes: two U+FFFD, no "[".
  std::vector<int32_t> generated = {bracket, lead, word.front()};
  const std::string whole = tokenizer.decode(joined(prompt, generated), true);
  CHECK(whole.find('[') == std::string::npos);
  CHECK(tokenizer.decode(prompt, true) + streamed(tokenizer, prompt, generated) == whole);
}

TEST_CASE("text stream: random tokens, byte tokens among them, stream as the whole row decodes") {
  for (const char* name : {"spm_gemma", "spm_llama2", "bytelevel_llama3", "bytelevel_gpt2"}) {
    const Tokenizer tokenizer = Tokenizer::from_file(std::string(PROBEKIT_FIXTURES "/tokenizers/") + name + "/tokenizer.json");
    std::vector<int32_t> bytes;
    for (int b = 0; b < 256; ++b) {
      std::optional<int32_t> id = tokenizer.token_to_id(fmt::format("<0x{:02X}>", b));
      if (id) bytes.push_back(*id);
    }
    const std::vector<int32_t> prompt = tokenizer.encode("The answer is", false);
    std::mt19937 random(7);
    std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(tokenizer.vocab_size()) - 1);
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<int32_t> generated;
      for (int t = 0; t < 12; ++t) {
        const bool byte = !bytes.empty() && random() % 2 == 0;
        generated.push_back(byte ? bytes[random() % bytes.size()] : any(random));
      }
      const std::string whole = tokenizer.decode(joined(prompt, generated), true);
      const std::string shown = tokenizer.decode(prompt, true) + streamed(tokenizer, prompt, generated);
      CHECK_MESSAGE(shown == whole, std::string(name), " trial ", trial, ": ", hex_bytes(shown), " / ", hex_bytes(whole));
    }
  }
}

TEST_CASE("text stream: a row stopped before its last token gives what it held back, once") {
  const Tokenizer tokenizer = Tokenizer::from_file(PROBEKIT_FIXTURES "/models/gemma3_text");
  TextStream stream(tokenizer, tokenizer.encode("Say it", true));
  CHECK(stream.add(*tokenizer.token_to_id("<0x5B>"), false).empty());  // a byte run waits for its end
  CHECK(stream.flush() == "[");
  CHECK(stream.flush().empty());
}
