// data/text/glue.h: GLUE-style sequence classification from TSV files.
//
//   TsvTable t = finetune::read_tsv("MRPC/train.tsv");
//   ClassifyColumns cols = finetune::resolve_columns(t, {});          // MRPC: "#1 String", ...
//   auto examples = finetune::classify_examples(t, cols);
//   auto labels = finetune::label_list(examples);                      // sorted: {"0", "1"}
//   auto features = finetune::classify_features(examples, labels, tokenizer, 128);
//   ClassifyScore s = finetune::classify_score(gold, predicted, labels.size(), positive_label_index(labels));
//
// GLUE's TSVs are not quoted: a row is split on tabs and quote characters are text. The first
// row is the header. A row with a different number of columns than the header is an error
// naming file:line (GLUE's own processors would silently misread it).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/text/wordpiece.h"

namespace unmask::finetune {

struct TsvTable {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;  // each has header.size() fields
  std::vector<int64_t> lines;                  // 1-based file line of every row
};

/// Reads a tab-separated file with a header row. Blank lines are skipped, a trailing \r is
/// dropped. Throws an Error for a missing file, an empty file, invalid UTF-8 or a row with the
/// wrong number of columns (naming file:line and both counts).
TsvTable read_tsv(const std::string& path);
TsvTable parse_tsv(const std::string& text, const std::string& origin);

/// Column choices as given on the command line: a header name or a 0-based index; empty = the
/// default for the file's layout (text_b empty after resolution = single sentences).
struct ClassifyColumns {
  std::string text_a, text_b, label;
};

/// Resolved column indexes (text_b = -1: no second text).
struct ClassifyColumnIndex {
  int64_t text_a = -1, text_b = -1, label = -1;
};

/// Picks the columns: given names/indexes first, then the GLUE layouts by header names
/// (MRPC "#1 String"/"#2 String"/"Quality"; SST-2 and CoLA-with-header "sentence"/"label";
/// RTE/WNLI/MNLI "sentence1"/"sentence2"/"label"|"gold_label"; QNLI "question"/"sentence"/"label";
/// QQP "question1"/"question2"/"is_duplicate"; "premise"/"hypothesis"/"label"; generic
/// "text"/"label"). `need_label` = false allows a file without a label column (prediction).
/// Throws naming the header when a column is unknown or the layout cannot be guessed.
ClassifyColumnIndex resolve_columns(const TsvTable& table, const ClassifyColumns& columns, bool need_label = true);

struct ClassifyExample {
  std::string text_a;
  std::optional<std::string> text_b;
  std::string label;  // empty when the file has no label column
  int64_t line = 0;
};

std::vector<ClassifyExample> classify_examples(const TsvTable& table, const ClassifyColumnIndex& columns);

/// The distinct labels, sorted (bytewise): label id = index.
std::vector<std::string> label_list(const std::vector<ClassifyExample>& examples);

/// The positive class for binary F1: the label "1" if present, else the second label.
int64_t positive_label_index(const std::vector<std::string>& labels);

struct ClassifyFeature {
  std::vector<int32_t> input_ids, segment_ids;  // [CLS] a [SEP] (b [SEP]), unpadded
  int32_t label = -1;                           // -1 = no label / unknown
};

/// Google's truncate_seq_pair: pop from the end of the longer list (from b on ties) until
/// a.size() + b.size() <= max_total.
void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t max_total);

/// Tokenizes, truncates (truncate_seq_pair to max_seq - 3 for pairs, max_seq - 2 for singles)
/// and maps each label through `labels` (an unknown label throws naming the line and the known
/// labels, unless allow_unknown_labels, which gives label -1).
std::vector<ClassifyFeature> classify_features(const std::vector<ClassifyExample>& examples,
                                               const std::vector<std::string>& labels,
                                               const text::WordPieceTokenizer& tokenizer, int64_t max_seq,
                                               bool allow_unknown_labels = false);

struct ClassifyScore {
  double accuracy = 0;   // x 100
  double f1 = 0;         // x 100: binary F1 of the positive class, or macro F1 over the classes
  bool binary = false;
  int64_t count = 0;
};

/// Accuracy and F1 over (gold, predicted) label ids. num_labels <= 2: F1 of `positive` (0 when
/// it is neither predicted nor gold); more: the mean of the per-class F1 over the classes that
/// occur in gold or predicted (scikit-learn's average="macro"). Gold ids < 0 are skipped.
ClassifyScore classify_score(const std::vector<int32_t>& gold, const std::vector<int32_t>& predicted,
                             int64_t num_labels, int64_t positive);

}  // namespace unmask::finetune
