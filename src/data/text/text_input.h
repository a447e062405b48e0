// data/text/text_input.h: text files -> a tokenized Corpus (the reading half of prepare-text).
//
//   std::vector<std::string> files = data::expand_inputs({"corpus/", "extra.txt"});
//   data::CorpusStats stats;
//   data::Corpus corpus = data::read_corpus(files, TextFormat::sentences, tokenizer, 2, &progress, stats);
//
// Line handling: a UTF-8 byte-order mark at the start of a file and a trailing \r are
// dropped; a line is blank when it holds only ASCII whitespace. Lines that are not valid
// UTF-8 are skipped and counted (the first one's file:line is kept for the report); a file
// with a NUL byte, or where more than half the non-blank lines are invalid UTF-8, is
// rejected as binary; a file without a non-blank line is rejected as empty.
//
// `sentences`: one sentence per line, a blank line ends the document (and so does the end of
// a file). `documents`: each non-blank line is a document, cut into sentences by
// split_sentences. Lines whose tokens come out empty are dropped, like Google's
// `if tokens:`. Literal special-token text in the corpus ("[MASK]", "[SEP]") is tokenized
// as ordinary text ("[", "mask", "]"), the way Google's FullTokenizer sees it, so the corpus
// cannot inject a real [SEP] or [MASK] into an instance.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/text/instances.h"
#include "data/text/pretrain_data.h"
#include "data/text/wordpiece.h"

namespace unmask::data {

class Progress;

/// Files and directories -> files: a directory contributes every regular file below it
/// (recursively, skipping names that start with '.'), sorted by path. Throws for a path that
/// does not exist or a directory without files.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

/// Rule-based sentence splitter: a sentence ends after '.', '!' or '?' (plus any further
/// terminators and closing quotes/brackets) when whitespace follows and the next word starts
/// with an uppercase letter, a digit, or an opening quote/bracket; never after an
/// abbreviation (Mr. Mrs. Ms. Dr. Prof. St. Jr. Sr. vs. etc. cf. al. Fig. No. Inc. Ltd. Co.
/// Corp. Jan. ... Dec. and more, case-insensitive), a single-letter initial ("J. Smith") or a
/// dotted abbreviation (e.g. i.e. U.S.). Returns trimmed, non-empty pieces of `text`.
std::vector<std::string_view> split_sentences(std::string_view text);

/// Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool is_valid_utf8(std::string_view bytes);

struct CorpusStats {
  int64_t files = 0, lines = 0, invalid_utf8_lines = 0;
  std::string first_invalid_utf8;  // "file:line" of the first skipped line
};

/// Reads and tokenizes `files` on `num_threads` threads (the result does not depend on it).
/// Progress (when given) counts input bytes.
Corpus read_corpus(const std::vector<std::string>& files, TextFormat format, const text::WordPieceTokenizer& tokenizer,
                   int num_threads, Progress* progress, CorpusStats& stats);

}  // namespace unmask::data
