// data/text/conll.cc: CoNLL reading, first-piece labelled windows and conlleval scoring (see
// conll.h).
#include "data/text/conll.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "io/file.h"
#include "data/text/unicode.h"
#include "unmask/error.h"

namespace unmask::finetune {

std::vector<ConllSentence> parse_conll(const std::string& text, const std::string& origin, bool unlabelled) {
  std::vector<ConllSentence> sentences;
  ConllSentence current;
  auto flush = [&] {
    if (!current.words.empty()) sentences.push_back(std::move(current));
    current = ConllSentence{};
  };
  size_t pos = 0;
  int64_t line_no = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    // Whitespace-separated fields (space or tab; \r of CRLF files included).
    std::vector<std::string> fields;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
      size_t j = i;
      while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
      if (j > i) fields.push_back(line.substr(i, j - i));
      i = j;
    }
    if (fields.empty()) {
      flush();
      continue;
    }
    if (fields[0] == "-DOCSTART-") {
      flush();
      continue;
    }
    try {
      text::unicode::decode_utf8(line, "line");
    } catch (const Error& e) {
      throw Error("conll: ", origin, ":", line_no, ": ", e.what(), Hint("the file must be UTF-8"));
    }
    if (fields.size() < 2 && !unlabelled)
      throw Error("conll: ", origin, ":", line_no, ": \"", fields[0], "\" has no label",
                  Hint("CoNLL lines are WORD ... LABEL (the label in the last column), a blank line between sentences"));
    if (current.words.empty()) current.line = line_no;
    current.words.push_back(fields.front());
    current.labels.push_back(unlabelled ? std::string() : fields.back());
  }
  flush();
  return sentences;
}

std::vector<ConllSentence> read_conll(const std::string& path, bool unlabelled) {
  if (!io::file_exists(path))
    throw Error("conll: ", path, " not found", Hint("pass a CoNLL file: WORD ... LABEL per line, blank lines between sentences"));
  std::vector<ConllSentence> s = parse_conll(io::read_file(path), path, unlabelled);
  if (s.empty()) throw Error("conll: ", path, " holds no sentences", Hint("CoNLL lines are WORD ... LABEL"));
  return s;
}

std::vector<std::string> conll_label_list(const std::vector<ConllSentence>& sentences) {
  std::set<std::string> labels;
  for (const auto& s : sentences) labels.insert(s.labels.begin(), s.labels.end());
  return {labels.begin(), labels.end()};
}

std::vector<ConllFeature> conll_features(const std::vector<ConllSentence>& sentences,
                                         const std::vector<std::string>& labels,
                                         const text::WordPieceTokenizer& tokenizer, int64_t max_seq,
                                         bool allow_unknown_labels) {
  if (max_seq < 3) throw Error("conll: max_seq ", max_seq, " is too short", Hint("use e.g. --max-seq 128"));
  const int32_t cls = tokenizer.vocab().cls_id(), sep = tokenizer.vocab().sep_id(), unk = tokenizer.vocab().unk_id();
  const size_t room = size_t(max_seq - 2);
  std::vector<ConllFeature> out;
  for (size_t si = 0; si < sentences.size(); ++si) {
    const ConllSentence& s = sentences[si];
    // Label ids and pieces of every word.
    std::vector<int32_t> word_labels(s.words.size());
    std::vector<std::vector<int32_t>> pieces(s.words.size());
    for (size_t w = 0; w < s.words.size(); ++w) {
      auto it = std::find(labels.begin(), labels.end(), s.labels[w]);
      if (it != labels.end()) {
        word_labels[w] = int32_t(it - labels.begin());
      } else if (allow_unknown_labels) {
        word_labels[w] = kIgnoreLabel;
      } else {
        std::string known;
        for (const auto& l : labels) known += (known.empty() ? "" : " ") + l;
        throw Error("conll: sentence at line ", s.line, ": label \"", s.labels[w], "\" is not one of the model's labels (",
                    known, ")", Hint("the labels come from the training file (saved as id2label in config.json)"));
      }
      pieces[w] = tokenizer.tokenize(s.words[w]);
      if (pieces[w].empty()) pieces[w].push_back(unk);
      if (pieces[w].size() > room) pieces[w].resize(room);  // a single word longer than a window
    }
    // Consecutive windows at word boundaries.
    for (size_t w = 0; w < s.words.size();) {
      ConllFeature f;
      f.sentence = int64_t(si);
      f.first_word = int64_t(w);
      f.input_ids.push_back(cls);
      f.labels.push_back(kIgnoreLabel);
      f.word_of_token.push_back(-1);
      while (w < s.words.size() && f.input_ids.size() - 1 + pieces[w].size() <= room) {
        for (size_t p = 0; p < pieces[w].size(); ++p) {
          f.input_ids.push_back(pieces[w][p]);
          f.labels.push_back(p == 0 ? word_labels[w] : kIgnoreLabel);
          f.word_of_token.push_back(p == 0 ? int64_t(w) : -1);
        }
        ++w;
      }
      f.input_ids.push_back(sep);
      f.labels.push_back(kIgnoreLabel);
      f.word_of_token.push_back(-1);
      out.push_back(std::move(f));
    }
  }
  return out;
}

std::vector<std::vector<int32_t>> conll_word_predictions(const std::vector<ConllFeature>& features,
                                                         const std::vector<std::vector<float>>& logits,
                                                         int64_t num_labels,
                                                         const std::vector<ConllSentence>& sentences) {
  if (logits.size() != features.size())
    throw Error("conll_word_predictions: ", logits.size(), " logit rows for ", features.size(), " features");
  std::vector<std::vector<int32_t>> out(sentences.size());
  for (size_t s = 0; s < sentences.size(); ++s) out[s].assign(sentences[s].words.size(), -1);
  for (size_t i = 0; i < features.size(); ++i) {
    const ConllFeature& f = features[i];
    if (int64_t(logits[i].size()) < int64_t(f.input_ids.size()) * num_labels)
      throw Error("conll_word_predictions: feature ", i, " has ", f.input_ids.size(), " tokens x ", num_labels,
                  " labels but ", logits[i].size(), " logits");
    for (size_t t = 0; t < f.word_of_token.size(); ++t) {
      const int64_t w = f.word_of_token[t];
      if (w < 0) continue;
      const float* row = logits[i].data() + t * size_t(num_labels);
      out.at(size_t(f.sentence)).at(size_t(w)) = int32_t(std::max_element(row, row + num_labels) - row);
    }
  }
  return out;
}

// ---- conlleval ---------------------------------------------------------------------------------

bool Chunk::operator<(const Chunk& o) const { return std::tie(start, end, type) < std::tie(o.start, o.end, o.type); }

namespace {

// conlleval splits "B-PER" into tag "B" and type "PER"; "O" has type "".
std::pair<std::string, std::string> split_tag(const std::string& label) {
  const size_t dash = label.find('-');
  if (dash == std::string::npos) return {label, ""};
  return {label.substr(0, dash), label.substr(dash + 1)};
}

// conlleval.pl's endOfChunk / startOfChunk, with the S- (single) and E- (end) tags of IOBES as
// the conlleval.py port handles them; for B/I/O tags the two agree.
bool end_of_chunk(const std::string& prev_tag, const std::string& tag, const std::string& prev_type,
                  const std::string& type) {
  if (prev_tag == "E" || prev_tag == "S") return true;
  if ((prev_tag == "B" || prev_tag == "I") && (tag == "B" || tag == "S" || tag == "O")) return true;
  return prev_tag != "O" && prev_tag != "." && prev_type != type;
}
bool start_of_chunk(const std::string& prev_tag, const std::string& tag, const std::string& prev_type,
                    const std::string& type) {
  if (tag == "B" || tag == "S") return true;
  if ((prev_tag == "E" || prev_tag == "S" || prev_tag == "O") && (tag == "E" || tag == "I")) return true;
  return tag != "O" && tag != "." && prev_type != type;
}

}  // namespace

std::vector<Chunk> extract_chunks(const std::vector<std::string>& tags) {
  std::vector<Chunk> chunks;
  std::string prev_tag = "O", prev_type;  // a sentence boundary reads as O
  bool open = false;
  int64_t start = 0;
  for (size_t i = 0; i <= tags.size(); ++i) {
    const auto [tag, type] = i < tags.size() ? split_tag(tags[i]) : std::pair<std::string, std::string>{"O", ""};
    if (open && end_of_chunk(prev_tag, tag, prev_type, type)) {
      chunks.push_back({start, int64_t(i) - 1, prev_type});
      open = false;
    }
    if (i < tags.size() && start_of_chunk(prev_tag, tag, prev_type, type)) {
      start = int64_t(i);
      open = true;
    }
    prev_tag = tag;
    prev_type = type;
  }
  return chunks;
}

ChunkScore chunk_score(const std::vector<std::vector<std::string>>& gold,
                       const std::vector<std::vector<std::string>>& predicted) {
  if (gold.size() != predicted.size())
    throw Error("chunk_score: ", gold.size(), " gold sentences but ", predicted.size(), " predicted");
  ChunkScore s;
  int64_t correct_tokens = 0;
  for (size_t i = 0; i < gold.size(); ++i) {
    if (gold[i].size() != predicted[i].size())
      throw Error("chunk_score: sentence ", i, " has ", gold[i].size(), " gold tags but ", predicted[i].size(), " predicted");
    for (size_t t = 0; t < gold[i].size(); ++t) correct_tokens += gold[i][t] == predicted[i][t];
    s.tokens += int64_t(gold[i].size());
    const std::vector<Chunk> g = extract_chunks(gold[i]), p = extract_chunks(predicted[i]);
    for (const Chunk& c : g) ++s.per_type[c.type].gold;
    for (const Chunk& c : p) ++s.per_type[c.type].predicted;
    const std::set<Chunk> gold_set(g.begin(), g.end());
    for (const Chunk& c : p)
      if (gold_set.count(c)) ++s.per_type[c.type].correct;
  }
  auto prf = [](int64_t correct, int64_t predicted, int64_t gold, double& p, double& r, double& f) {
    p = predicted ? 100.0 * double(correct) / double(predicted) : 0.0;
    r = gold ? 100.0 * double(correct) / double(gold) : 0.0;
    f = p + r > 0 ? 2 * p * r / (p + r) : 0.0;
  };
  for (auto& [type, t] : s.per_type) {
    s.gold_chunks += t.gold;
    s.predicted_chunks += t.predicted;
    s.correct_chunks += t.correct;
    prf(t.correct, t.predicted, t.gold, t.precision, t.recall, t.f1);
  }
  prf(s.correct_chunks, s.predicted_chunks, s.gold_chunks, s.precision, s.recall, s.f1);
  s.accuracy = s.tokens ? 100.0 * double(correct_tokens) / double(s.tokens) : 0.0;
  return s;
}

}  // namespace unmask::finetune
