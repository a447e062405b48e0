// fuzz/fuzz_tokenizer.cc: libFuzzer target for the WordPiece tokenizer.
//
// Feeds arbitrary bytes to WordPieceTokenizer::tokenize / encode / decode. Invalid UTF-8 and
// impossible truncations must end in an unmask::Error; everything else must succeed with ids
// inside the vocabulary, framing [CLS] ... [SEP] and lengths within max_length.
//
// Input layout: byte 0 picks the options (lowercase, strip_accents, CJK padding) and the
// truncation strategy, byte 1 the max_length (0 = none), and a 0xFF byte, if any, splits the
// rest into a text pair (0xFF never occurs in UTF-8).
//
// The vocabulary is $UNMASK_VOCAB (e.g. data/bert-base-uncased-vocab.txt) or a
// small built-in one.
//
//   clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc \
//       fuzz/fuzz_tokenizer.cc src/data/text/{wordpiece,unicode,unicode_decompositions,unicode_tables,tokenizer_config,vocab_trainer}.cc -o /tmp/fuzz_tokenizer
//   UNMASK_VOCAB=data/bert-base-uncased-vocab.txt /tmp/fuzz_tokenizer -max_total_time=30
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "data/text/wordpiece.h"
#include "unmask/error.h"

namespace {

using unmask::text::Truncation;
using unmask::text::Vocab;
using unmask::text::WordPieceOptions;
using unmask::text::WordPieceTokenizer;

Vocab load_vocab() {
  if (const char* path = std::getenv("UNMASK_VOCAB"); path && *path) return Vocab::load(path);
  return Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "i",
                             "the", "un", "##aff", "##able", "##s", "##ing", ",", ".", "!",
                             "中", "é", "##é", "σ", "ς", "##σ", "ᄒ", "##ᅡ", "[", "]", "cl"});
}

// One tokenizer per option combination, built once (loading the real vocab takes ~30 ms).
const WordPieceTokenizer& tokenizer_for(uint8_t selector) {
  static std::unique_ptr<WordPieceTokenizer> cache[8];
  const int index = selector & 7;
  if (!cache[index]) {
    WordPieceOptions options;
    options.lowercase = index & 1;
    if (index & 2) options.strip_accents = !options.lowercase;  // else follow lowercase
    options.tokenize_chinese_chars = !(index & 4);
    cache[index] = std::make_unique<WordPieceTokenizer>(load_vocab(), options);
  }
  return *cache[index];
}

void check(bool ok) {
  if (!ok) std::abort();  // an invariant broke: let libFuzzer record the input
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const WordPieceTokenizer& tok = tokenizer_for(data[0]);
  const Truncation truncation = static_cast<Truncation>((data[0] >> 3) & 3);
  const int max_length = data[1];
  std::string_view rest(reinterpret_cast<const char*>(data + 2), size - 2);
  std::optional<std::string_view> second;
  if (size_t split = rest.find('\xFF'); split != std::string_view::npos) {
    second = rest.substr(split + 1);
    rest = rest.substr(0, split);
  }
  const int32_t vocab_size = tok.vocab().size();
  try {
    for (int32_t id : tok.tokenize(rest)) check(id >= 0 && id < vocab_size);
    (void)tok.decode(tok.tokenize(rest));
  } catch (const unmask::Error&) {
    // Expected for invalid UTF-8.
  }
  try {
    auto e = tok.encode(rest, second, max_length, truncation);
    check(e.ids.size() == e.type_ids.size());
    check(e.ids.size() >= (second ? 3u : 2u));
    check(e.ids.front() == tok.vocab().cls_id() && e.ids.back() == tok.vocab().sep_id());
    check(max_length == 0 || e.ids.size() <= static_cast<size_t>(max_length));
    for (int32_t id : e.ids) check(id >= 0 && id < vocab_size);
  } catch (const unmask::Error&) {
    // Expected for invalid UTF-8 and for inputs that cannot be truncated to max_length.
  }
  return 0;
}
