// data/text/glue.cc: TSV reading, column choice, features and metrics for sequence
// classification (see glue.h).
#include "data/text/glue.h"

#include <algorithm>
#include <set>

#include "io/file.h"
#include "data/text/unicode.h"
#include "unmask/error.h"

namespace unmask::finetune {
namespace {

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (;;) {
    const size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
    if (tab == std::string::npos) break;
    start = tab + 1;
  }
  return fields;
}

std::string join_header(const std::vector<std::string>& header) {
  std::string out;
  for (size_t i = 0; i < header.size(); ++i) out += (i ? ", \"" : "\"") + header[i] + "\"";
  return out;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A known layout: the header names of text_a, text_b ("" = single sentence) and the label.
struct Layout {
  const char* name;
  const char* text_a;
  const char* text_b;
  const char* label;
};
constexpr Layout kLayouts[] = {
    {"MRPC", "#1 String", "#2 String", "Quality"},
    {"QQP", "question1", "question2", "is_duplicate"},
    {"MNLI", "sentence1", "sentence2", "gold_label"},
    {"RTE/WNLI/STS-B", "sentence1", "sentence2", "label"},
    {"QNLI", "question", "sentence", "label"},
    {"NLI", "premise", "hypothesis", "label"},
    {"SST-2/CoLA", "sentence", "", "label"},
    {"text", "text", "", "label"},
};

}  // namespace

TsvTable parse_tsv(const std::string& text, const std::string& origin) {
  TsvTable t;
  t.path = origin;
  size_t pos = 0;
  int64_t line_no = 0;
  // A UTF-8 byte-order mark (MRPC's files start with one) is not part of the first column name.
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) pos = 3;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    try {
      text::unicode::decode_utf8(line, "line");
    } catch (const Error& e) {
      throw Error("tsv: ", origin, ":", line_no, ": ", e.what(), Hint("the file must be UTF-8"));
    }
    std::vector<std::string> fields = split_tabs(line);
    if (t.header.empty()) {
      t.header = std::move(fields);
      continue;
    }
    if (fields.size() != t.header.size())
      throw Error("tsv: ", origin, ":", line_no, ": ", fields.size(), " tab-separated columns, but the header has ",
                  t.header.size(), " (", join_header(t.header), ")",
                  Hint("GLUE TSVs are split on tabs without quoting: a field must not contain a tab or a newline"));
    t.rows.push_back(std::move(fields));
    t.lines.push_back(line_no);
  }
  if (t.header.empty()) throw Error("tsv: ", origin, " is empty", Hint("the first line must be a tab-separated header"));
  return t;
}

TsvTable read_tsv(const std::string& path) {
  if (!io::file_exists(path))
    throw Error("tsv: ", path, " not found", Hint("pass a tab-separated file with a header row, e.g. GLUE's MRPC/train.tsv"));
  return parse_tsv(io::read_file(path), path);
}

ClassifyColumnIndex resolve_columns(const TsvTable& table, const ClassifyColumns& columns, bool need_label) {
  const auto& h = table.header;
  auto find = [&](const std::string& name) -> int64_t {
    auto it = std::find(h.begin(), h.end(), name);
    return it == h.end() ? -1 : int64_t(it - h.begin());
  };
  auto resolve = [&](const std::string& value, const char* option) -> int64_t {
    if (int64_t i = find(value); i >= 0) return i;
    if (all_digits(value)) {
      const int64_t i = std::stoll(value);
      if (i < int64_t(h.size())) return i;
      throw Error("tsv: --", option, " ", value, " is past the last column of ", table.path, " (", h.size(), " columns: ",
                  join_header(h), ")", Hint("column indexes count from 0"));
    }
    throw Error("tsv: --", option, " \"", value, "\" is not a column of ", table.path, " (header: ", join_header(h), ")",
                Hint("give a header name or a 0-based column index"));
  };
  // The first known layout whose columns (for the roles not given explicitly) all exist.
  const Layout* layout = nullptr;
  for (const Layout& l : kLayouts) {
    const bool a_ok = !columns.text_a.empty() || find(l.text_a) >= 0;
    const bool b_ok = !columns.text_b.empty() || !*l.text_b || find(l.text_b) >= 0;
    const bool label_ok = !columns.label.empty() || find(l.label) >= 0 || !need_label;
    if (a_ok && b_ok && label_ok) {
      layout = &l;
      break;
    }
  }
  const bool need_layout = columns.text_a.empty() || (columns.label.empty() && need_label);
  if (!layout && need_layout)
    throw Error("tsv: cannot tell the text and label columns of ", table.path, " (header: ", join_header(h), ")",
                Hint("name them: --text-a COL [--text-b COL] --label COL (a header name or a 0-based index)"));
  ClassifyColumnIndex out;
  out.text_a = !columns.text_a.empty() ? resolve(columns.text_a, "text-a") : find(layout->text_a);
  if (columns.text_b == "none") {
    out.text_b = -1;
  } else if (!columns.text_b.empty()) {
    out.text_b = resolve(columns.text_b, "text-b");
  } else if (layout && *layout->text_b) {
    out.text_b = find(layout->text_b);
  }
  if (!columns.label.empty()) {
    out.label = resolve(columns.label, "label");
  } else if (layout) {
    out.label = find(layout->label);
  }
  if (need_label && out.label < 0)
    throw Error("tsv: ", table.path, " has no label column (header: ", join_header(h), ")", Hint("name it with --label COL"));
  return out;
}

std::vector<ClassifyExample> classify_examples(const TsvTable& table, const ClassifyColumnIndex& columns) {
  std::vector<ClassifyExample> out;
  out.reserve(table.rows.size());
  for (size_t r = 0; r < table.rows.size(); ++r) {
    const auto& row = table.rows[r];
    ClassifyExample ex;
    ex.text_a = row.at(size_t(columns.text_a));
    if (columns.text_b >= 0) ex.text_b = row.at(size_t(columns.text_b));
    if (columns.label >= 0) ex.label = row.at(size_t(columns.label));
    ex.line = table.lines[r];
    out.push_back(std::move(ex));
  }
  return out;
}

std::vector<std::string> label_list(const std::vector<ClassifyExample>& examples) {
  std::set<std::string> labels;
  for (const auto& ex : examples) labels.insert(ex.label);
  return {labels.begin(), labels.end()};
}

int64_t positive_label_index(const std::vector<std::string>& labels) {
  auto it = std::find(labels.begin(), labels.end(), "1");
  if (it != labels.end()) return int64_t(it - labels.begin());
  return labels.size() >= 2 ? 1 : 0;
}

void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t max_total) {
  while (a.size() + b.size() > max_total) {
    if (a.size() > b.size()) {
      a.pop_back();
    } else {
      b.pop_back();
    }
  }
}

std::vector<ClassifyFeature> classify_features(const std::vector<ClassifyExample>& examples,
                                               const std::vector<std::string>& labels,
                                               const text::WordPieceTokenizer& tokenizer, int64_t max_seq,
                                               bool allow_unknown_labels) {
  if (max_seq < 4) throw Error("classify: max_seq ", max_seq, " is too short", Hint("use e.g. --max-seq 128"));
  const int32_t cls = tokenizer.vocab().cls_id(), sep = tokenizer.vocab().sep_id();
  std::vector<ClassifyFeature> out;
  out.reserve(examples.size());
  for (const auto& ex : examples) {
    ClassifyFeature f;
    std::vector<int32_t> a = tokenizer.tokenize(ex.text_a), b;
    if (ex.text_b) {
      b = tokenizer.tokenize(*ex.text_b);
      truncate_seq_pair(a, b, size_t(max_seq - 3));
    } else if (int64_t(a.size()) > max_seq - 2) {
      a.resize(size_t(max_seq - 2));
    }
    f.input_ids.push_back(cls);
    f.input_ids.insert(f.input_ids.end(), a.begin(), a.end());
    f.input_ids.push_back(sep);
    f.segment_ids.assign(f.input_ids.size(), 0);
    if (ex.text_b) {
      f.input_ids.insert(f.input_ids.end(), b.begin(), b.end());
      f.input_ids.push_back(sep);
      f.segment_ids.resize(f.input_ids.size(), 1);
    }
    auto it = std::find(labels.begin(), labels.end(), ex.label);
    if (it != labels.end()) {
      f.label = int32_t(it - labels.begin());
    } else if (!allow_unknown_labels) {
      std::string known;
      for (const auto& l : labels) known += (known.empty() ? "\"" : ", \"") + l + "\"";
      throw Error("classify: line ", ex.line, ": label \"", ex.label, "\" is not one of the model's labels (", known, ")",
                  Hint("the labels come from the training file (saved as id2label in config.json)"));
    }
    out.push_back(std::move(f));
  }
  return out;
}

ClassifyScore classify_score(const std::vector<int32_t>& gold, const std::vector<int32_t>& predicted,
                             int64_t num_labels, int64_t positive) {
  if (gold.size() != predicted.size())
    throw Error("classify_score: ", gold.size(), " gold labels but ", predicted.size(), " predictions");
  ClassifyScore s;
  s.binary = num_labels <= 2;
  const size_t L = size_t(std::max<int64_t>(num_labels, 1));
  // Per class: true positives, gold count, predicted count.
  std::vector<int64_t> tp(L, 0), gold_n(L, 0), pred_n(L, 0);
  int64_t correct = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    if (gold[i] < 0) continue;
    ++s.count;
    if (gold[i] == predicted[i]) ++correct;
    if (size_t(gold[i]) < L) ++gold_n[size_t(gold[i])];
    if (predicted[i] >= 0 && size_t(predicted[i]) < L) {
      ++pred_n[size_t(predicted[i])];
      if (gold[i] == predicted[i]) ++tp[size_t(gold[i])];
    }
  }
  if (s.count == 0) return s;
  s.accuracy = 100.0 * double(correct) / double(s.count);
  // F1 = 2 tp / (gold + predicted), the harmonic mean of precision and recall (0 if tp = 0).
  auto f1_of = [&](size_t c) { return tp[c] == 0 ? 0.0 : 2.0 * double(tp[c]) / double(gold_n[c] + pred_n[c]); };
  if (s.binary) {
    s.f1 = positive >= 0 && size_t(positive) < L ? 100.0 * f1_of(size_t(positive)) : 0.0;
  } else {
    double sum = 0;
    int64_t classes = 0;
    for (size_t c = 0; c < L; ++c) {
      if (gold_n[c] == 0 && pred_n[c] == 0) continue;
      sum += f1_of(c);
      ++classes;
    }
    s.f1 = classes ? 100.0 * sum / double(classes) : 0.0;
  }
  return s;
}

}  // namespace unmask::finetune
