// data/text/squad.h: SQuAD v1.1 question answering: examples, features, decoding, metrics.
//
//   SquadReadReport report;
//   auto examples = finetune::read_squad("train-v1.1.json", /*training=*/true, &report);
//   auto features = finetune::squad_features(examples, tokenizer, {}, /*training=*/true);
//   // ... train on features (finetune/batch.h), or run the model over them and keep the
//   // start/end logits of every feature:
//   auto predictions = finetune::squad_predict(examples, features, logits, tokenizer, {});
//   SquadScore s = finetune::squad_evaluate(examples, predictions);   // EM, F1 x 100
//
// The rules are those of Google's run_squad.py (also Hugging Face's legacy run_squad):
//  * the context is split into words on whitespace (' ', \t, \r, \n, U+202F); answer_start
//    counts code points (Python characters) and maps to a word through char_to_word_offset;
//  * every word is WordPiece-tokenized (tok_to_orig maps a piece back to its word); the answer's
//    piece span is tightened to the pieces of the tokenized answer text ("improve answer span");
//  * the document is cut into windows of max_seq - query - 3 pieces, each starting doc_stride
//    pieces after the previous one; a piece has "max context" in the window where
//    min(left, right context) + 0.01 * window length is largest;
//  * [CLS] query [SEP] window [SEP], segment 0 for the first part and 1 for the rest; a window
//    that does not hold the whole answer is labelled (0, 0), i.e. [CLS];
//  * decoding keeps the n_best_size best start and end positions of each feature, drops spans
//    outside the window, without max context, reversed or longer than max_answer_length, takes
//    the best start+end logit sum and maps it back to the original text (get_final_text:
//    the de-tokenized prediction is found in the basic-tokenized original and projected
//    through the space-free character alignment; on any mismatch the whole words are used);
//  * metrics are the official evaluate-v1.1.py: answers normalized (lowercase, ASCII
//    punctuation removed, articles a/an/the removed, whitespace collapsed); EM and token F1 are
//    maxima over the ground truths, averaged over every question and multiplied by 100.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/text/wordpiece.h"

namespace unmask::finetune {

struct SquadAnswer {
  std::string text;
  int64_t answer_start = 0;  // code-point offset into the context
};

struct SquadExample {
  std::string id;
  std::string question;
  std::string context;
  std::vector<SquadAnswer> answers;    // every ground truth (the dev set has several)
  std::vector<std::string> doc_words;  // the context split on whitespace
  // Training target (the first answer): word span in doc_words; -1 when not training.
  int64_t start_word = -1, end_word = -1;
};

struct SquadReadReport {
  int64_t questions = 0;                // qas seen in the file
  int64_t skipped = 0;                  // training questions whose answer could not be located
  std::vector<std::string> warnings;    // one line per skipped question (like HF's log)
};

/// Reads a SQuAD v1.1 JSON file (data[].paragraphs[].context / qas[].id, question, answers[]).
/// Training: each question needs an answer; the first answer is the target, and an answer whose
/// answer_start/text do not match the context is skipped with a warning (as HF does).
/// Evaluation: the answers are kept as ground truths (none is fine). Throws an Error naming the
/// file and the JSON path for a missing file, invalid JSON or a field of the wrong type.
std::vector<SquadExample> read_squad(const std::string& path, bool training, SquadReadReport* report = nullptr);
std::vector<SquadExample> parse_squad(const std::string& json_text, const std::string& origin, bool training,
                                      SquadReadReport* report = nullptr);

/// The context split into words as run_squad does, with the word of every code point.
struct SquadWords {
  std::vector<std::string> words;          // UTF-8
  std::vector<int64_t> char_to_word;       // [code points of the context]: word index (-1 before the first word)
};
SquadWords squad_split_words(const std::string& context);

struct SquadFeatureOptions {
  int64_t max_seq_length = 384;
  int64_t doc_stride = 128;
  int64_t max_query_length = 64;
};

/// One window of one example: [CLS] query [SEP] doc-window [SEP], unpadded.
struct SquadFeature {
  int64_t example_index = 0;
  int64_t doc_span_index = 0;
  std::vector<int32_t> input_ids;    // [T]
  std::vector<int32_t> segment_ids;  // [T]
  // Per position (size T): the word of doc_words a doc piece belongs to (-1 for [CLS], the
  // query and the [SEP]s), and whether this window is the piece's max-context window.
  std::vector<int64_t> token_to_word;
  std::vector<uint8_t> token_is_max_context;
  // Training target, positions in input_ids; (0, 0) = [CLS] when the window misses the answer.
  int64_t start_position = 0, end_position = 0;
};

/// Windows of every example. Throws an Error if max_seq_length leaves no room for the document
/// (max_seq_length - min(query, max_query_length) - 3 < 1) or doc_stride < 1.
std::vector<SquadFeature> squad_features(const std::vector<SquadExample>& examples,
                                         const text::WordPieceTokenizer& tokenizer,
                                         const SquadFeatureOptions& options, bool training);

/// run_squad's _check_is_max_context over windows given as (start, length) in doc pieces.
bool squad_is_max_context(const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t span_index,
                          int64_t position);

/// run_squad's _improve_answer_span: the first (start, end) inside [start, end] whose pieces
/// equal the pieces of answer_text, else (start, end) unchanged.
std::pair<int64_t, int64_t> squad_improve_answer_span(const std::vector<int32_t>& doc_pieces, int64_t start,
                                                      int64_t end, const text::WordPieceTokenizer& tokenizer,
                                                      const std::string& answer_text);

struct SquadDecodeOptions {
  int64_t n_best_size = 20;
  int64_t max_answer_length = 30;
};

/// Start and end logits of one feature, one value per position of its input_ids (or more:
/// positions past the feature's length are ignored).
struct SquadLogits {
  std::vector<float> start, end;
};

/// The best answer text of every example, keyed by question id ("empty" when no valid span
/// exists, as run_squad). logits[i] belongs to features[i]. Lowercasing in get_final_text
/// follows the tokenizer's options.
/// probabilities (optional): per question, the answer's softmax over the scores (start + end
/// logit) of the n_best_size best candidate spans, as run_squad's nbest_predictions.json.
std::map<std::string, std::string> squad_predict(const std::vector<SquadExample>& examples,
                                                 const std::vector<SquadFeature>& features,
                                                 const std::vector<SquadLogits>& logits,
                                                 const text::WordPieceTokenizer& tokenizer,
                                                 const SquadDecodeOptions& options,
                                                 std::map<std::string, double>* probabilities = nullptr);

/// run_squad's get_final_text: projects pred_text (de-tokenized pieces) onto orig_text (the
/// original words joined by spaces). Returns orig_text when the alignment fails.
std::string squad_final_text(const std::string& pred_text, const std::string& orig_text, bool lowercase,
                             bool strip_accents);

/// BERT's BasicTokenizer (no WordPiece): clean-up, CJK padding, lowercase + accent stripping
/// when asked, split on whitespace and punctuation. Words are UTF-8.
std::vector<std::string> basic_tokenize(const std::string& text, bool lowercase, bool strip_accents);

// ---- evaluate-v1.1.py ----------------------------------------------------------------------

/// lower -> drop ASCII punctuation -> drop the words a/an/the -> collapse whitespace.
std::string squad_normalize_answer(const std::string& s);
double squad_exact_match(const std::string& prediction, const std::string& ground_truth);  // 0 or 1
double squad_f1(const std::string& prediction, const std::string& ground_truth);           // [0, 1]

struct SquadScore {
  double exact_match = 0;  // x 100
  double f1 = 0;           // x 100
  int64_t total = 0;       // questions (an unanswered one counts as 0)
  int64_t unanswered = 0;  // questions without a prediction
};
SquadScore squad_evaluate(const std::vector<SquadExample>& examples,
                          const std::map<std::string, std::string>& predictions);

/// {"id": "text", ...} as predictions.json (keys sorted), UTF-8, ending with a newline.
std::string squad_predictions_json(const std::map<std::string, std::string>& predictions);

}  // namespace unmask::finetune
