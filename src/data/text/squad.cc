// data/text/squad.cc: SQuAD v1.1 reading, windowed features, n-best decoding and the official
// metrics (see squad.h for the rules and where they come from).
#include "data/text/squad.h"

#include <algorithm>
#include <set>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "io/file.h"
#include "data/text/unicode.h"
#include "unmask/error.h"

namespace unmask::finetune {
namespace unicode = text::unicode;
using json = nlohmann::json;

namespace {

// run_squad's is_whitespace: the characters that separate context words.
bool is_squad_whitespace(char32_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == 0x202F; }

// Python's str.isspace() (what str.split() with no argument splits on): White_Space plus the
// ASCII separators U+001C..U+001F.
bool is_python_space(char32_t c) { return unicode::is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

// Python's \w in a str pattern: letters, numbers and the underscore.
bool is_python_word(char32_t c) {
  if (c == '_') return true;
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  using C = unicode::Category;
  const C cat = unicode::category(c);
  return cat == C::Lu || cat == C::Ll || cat == C::Lt || cat == C::Lm || cat == C::Lo || cat == C::Nd ||
         cat == C::Nl || cat == C::No;
}

// The same word split as Python's text.split().
std::vector<std::u32string> python_split(std::u32string_view s) {
  std::vector<std::u32string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_python_space(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !is_python_space(s[j])) ++j;
    if (j > i) out.emplace_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, from.size(), from) == 0) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

std::u32string join(const std::vector<std::u32string>& parts, char32_t sep) {
  std::u32string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out.push_back(sep);
    out += parts[i];
  }
  return out;
}

// BERT's basic-tokenizer character classes (the same as text/wordpiece.cc).
bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}
bool is_bert_punctuation(char32_t cp) {
  if (cp < 0x80) return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) || (cp >= 123 && cp <= 126);
  return unicode::is_punctuation_category(cp);
}
bool is_bert_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= '\t' && cp <= '\r');
  return unicode::is_white_space(cp);
}
bool is_removed_by_cleanup(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  if (cp == 0 || cp < 0x20 || cp == 0x7F) return true;
  if (cp < 0x80) return false;
  return cp == 0xFFFD || unicode::is_other(cp);
}

std::vector<std::u32string> basic_tokenize_cps(std::u32string_view text, bool lowercase, bool strip_accents) {
  std::u32string normalized;
  for (char32_t cp : text) {
    if (is_removed_by_cleanup(cp)) continue;
    if (is_bert_whitespace(cp)) {
      normalized.push_back(' ');
    } else if (is_cjk_ideograph(cp)) {
      normalized += {U' ', cp, U' '};
    } else if (lowercase) {
      unicode::append_lowercase(cp, normalized);
    } else {
      normalized.push_back(cp);
    }
  }
  if (strip_accents) {
    std::u32string decomposed;
    unicode::append_nfd(normalized, decomposed);
    normalized.clear();
    for (char32_t cp : decomposed)
      if (cp < 0x300 || unicode::category(cp) != unicode::Category::Mn) normalized.push_back(cp);
  }
  std::vector<std::u32string> words;
  size_t start = 0;
  for (size_t i = 0; i < normalized.size(); ++i) {
    const char32_t cp = normalized[i];
    const bool space = is_bert_whitespace(cp);
    if (!space && !is_bert_punctuation(cp)) continue;
    if (i > start) words.emplace_back(normalized.substr(start, i - start));
    if (!space) words.emplace_back(1, cp);
    start = i + 1;
  }
  if (normalized.size() > start) words.emplace_back(normalized.substr(start));
  return words;
}

// ---- JSON access with the path in every message ------------------------------------------------

const json& member(const json& obj, const char* key, const std::string& where, const std::string& origin) {
  if (!obj.is_object()) throw Error("squad: ", origin, ": ", where, " is not a JSON object");
  auto it = obj.find(key);
  if (it == obj.end())
    throw Error("squad: ", origin, ": ", where, " has no \"", key, "\"",
                Hint("SQuAD v1.1 layout: data[].paragraphs[].{context, qas[].{id, question, answers[].{text, answer_start}}}"));
  return *it;
}
const json& array_member(const json& obj, const char* key, const std::string& where, const std::string& origin) {
  const json& v = member(obj, key, where, origin);
  if (!v.is_array()) throw Error("squad: ", origin, ": ", where, ".", key, " is not an array (", v.type_name(), ")");
  return v;
}
std::string string_member(const json& obj, const char* key, const std::string& where, const std::string& origin) {
  const json& v = member(obj, key, where, origin);
  if (v.is_number_integer()) return v.dump();  // some ids are numbers
  if (!v.is_string()) throw Error("squad: ", origin, ": ", where, ".", key, " is not a string (", v.type_name(), ")");
  return v.get<std::string>();
}

std::string at(const std::string& base, const char* key, size_t i) { return base + "." + key + "[" + std::to_string(i) + "]"; }

}  // namespace

std::vector<std::string> basic_tokenize(const std::string& text, bool lowercase, bool strip_accents) {
  std::vector<std::string> out;
  for (const auto& w : basic_tokenize_cps(unicode::decode_utf8(text, "basic tokenizer input"), lowercase, strip_accents))
    out.push_back(unicode::encode_utf8(w));
  return out;
}

SquadWords squad_split_words(const std::string& context) {
  const std::u32string cps = unicode::decode_utf8(context, "SQuAD context");
  std::vector<std::u32string> words;
  SquadWords out;
  out.char_to_word.reserve(cps.size());
  bool prev_is_whitespace = true;
  for (char32_t c : cps) {
    if (is_squad_whitespace(c)) {
      prev_is_whitespace = true;
    } else {
      if (prev_is_whitespace) words.emplace_back();
      words.back().push_back(c);
      prev_is_whitespace = false;
    }
    out.char_to_word.push_back(int64_t(words.size()) - 1);
  }
  for (const auto& w : words) out.words.push_back(unicode::encode_utf8(w));
  return out;
}

std::vector<SquadExample> parse_squad(const std::string& json_text, const std::string& origin, bool training,
                                      SquadReadReport* report) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw Error("squad: ", origin, " is not valid JSON: ", e.what(),
                Hint("a SQuAD v1.1 file is one JSON object {\"version\": ..., \"data\": [...]}"));
  }
  SquadReadReport local;
  SquadReadReport& rep = report ? *report : local;
  // SQuAD v2.0 adds unanswerable questions: under v1.1 rules each would be trained on nothing
  // and scored as a miss, a wrong number with no sign of it. Refused by version and by content.
  const auto v2_refusal = [&](const std::string& where) {
    return Error("squad: ", origin, " is SQuAD v2.0 (", where,
                 "): it has unanswerable questions, and unmask trains and scores SQuAD v1.1 only (every "
                 "no-answer question would be skipped in training and counted wrong in evaluation)",
                 Hint("use a v1.1 file (train-v1.1.json / dev-v1.1.json)"));
  };
  if (root.is_object())
    if (auto it = root.find("version"); it != root.end() && it->is_string() && it->get<std::string>().rfind("v2", 0) == 0)
      throw v2_refusal("\"version\": \"" + it->get<std::string>() + "\"");
  const json& data = array_member(root, "data", "the top level", origin);
  std::vector<SquadExample> examples;
  for (size_t a = 0; a < data.size(); ++a) {
    const std::string article = "data[" + std::to_string(a) + "]";
    const json& paragraphs = array_member(data[a], "paragraphs", article, origin);
    for (size_t p = 0; p < paragraphs.size(); ++p) {
      const std::string para = at(article, "paragraphs", p);
      const std::string context = string_member(paragraphs[p], "context", para, origin);
      SquadWords words;
      try {
        words = squad_split_words(context);
      } catch (const Error& e) {
        throw Error("squad: ", origin, ": ", para, ".context: ", e.what());
      }
      const json& qas = array_member(paragraphs[p], "qas", para, origin);
      for (size_t q = 0; q < qas.size(); ++q) {
        const std::string qa = at(para, "qas", q);
        if (qas[q].is_object())
          if (auto it = qas[q].find("is_impossible"); it != qas[q].end() && it->is_boolean() && it->get<bool>())
            throw v2_refusal(qa + ".is_impossible is true");
        ++rep.questions;
        SquadExample ex;
        ex.id = string_member(qas[q], "id", qa, origin);
        ex.question = string_member(qas[q], "question", qa, origin);
        ex.context = context;
        ex.doc_words = words.words;
        // Unlabelled questions (prediction) may leave "answers" out; training needs them.
        static const json kNoAnswers = json::array();
        const json& answers = !training && qas[q].is_object() && !qas[q].contains("answers")
                                  ? kNoAnswers
                                  : array_member(qas[q], "answers", qa, origin);
        for (size_t k = 0; k < answers.size(); ++k) {
          const std::string ans = at(qa, "answers", k);
          SquadAnswer answer;
          answer.text = string_member(answers[k], "text", ans, origin);
          const json& start = member(answers[k], "answer_start", ans, origin);
          if (!start.is_number_integer())
            throw Error("squad: ", origin, ": ", ans, ".answer_start is not an integer (", start.dump(), ")");
          answer.answer_start = start.get<int64_t>();
          ex.answers.push_back(std::move(answer));
        }
        if (training) {
          auto skip = [&](const std::string& why) {
            ++rep.skipped;
            rep.warnings.push_back("squad: " + origin + ": skipping question " + ex.id + " (" + qa + "): " + why);
          };
          if (ex.answers.empty()) {
            skip("no answer to train on");
            continue;
          }
          // The first answer is the target (the v1.1 training set has exactly one).
          const SquadAnswer& answer = ex.answers[0];
          const std::u32string answer_cps = unicode::decode_utf8(answer.text, "SQuAD answer");
          const int64_t n_chars = int64_t(words.char_to_word.size());
          const int64_t first = answer.answer_start, last = answer.answer_start + int64_t(answer_cps.size()) - 1;
          if (answer_cps.empty() || first < 0 || last >= n_chars) {
            skip("answer_start " + std::to_string(first) + " and text length " + std::to_string(answer_cps.size()) +
                 " fall outside the context (" + std::to_string(n_chars) + " characters)");
            continue;
          }
          ex.start_word = std::max<int64_t>(0, words.char_to_word[size_t(first)]);
          ex.end_word = std::max<int64_t>(0, words.char_to_word[size_t(last)]);
          // HF's check: the answer's whitespace-normalized text must occur in its words.
          std::vector<std::u32string> span_words;
          for (int64_t w = ex.start_word; w <= ex.end_word && w < int64_t(words.words.size()); ++w)
            span_words.push_back(unicode::decode_utf8(words.words[size_t(w)]));
          const std::u32string actual = join(span_words, U' ');
          const std::u32string cleaned = join(python_split(answer_cps), U' ');
          if (cleaned.empty()) {
            skip("the answer text is only whitespace");
            continue;
          }
          if (actual.find(cleaned) == std::u32string::npos) {
            skip("could not find answer: '" + unicode::encode_utf8(actual) + "' vs. '" + unicode::encode_utf8(cleaned) + "'");
            continue;
          }
        }
        examples.push_back(std::move(ex));
      }
    }
  }
  return examples;
}

std::vector<SquadExample> read_squad(const std::string& path, bool training, SquadReadReport* report) {
  if (!io::file_exists(path))
    throw Error("squad: ", path, " not found", Hint("pass a SQuAD v1.1 JSON file, e.g. train-v1.1.json or dev-v1.1.json"));
  return parse_squad(io::read_file(path), path, training, report);
}

// ---- features ------------------------------------------------------------------------------

bool squad_is_max_context(const std::vector<std::pair<int64_t, int64_t>>& spans, int64_t span_index,
                          int64_t position) {
  double best_score = -1;
  int64_t best_index = -1;
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto [start, length] = spans[i];
    const int64_t end = start + length - 1;
    if (position < start || position > end) continue;
    const double score = double(std::min(position - start, end - position)) + 0.01 * double(length);
    if (best_index < 0 || score > best_score) {
      best_score = score;
      best_index = int64_t(i);
    }
  }
  return best_index == span_index;
}

std::pair<int64_t, int64_t> squad_improve_answer_span(const std::vector<int32_t>& doc_pieces, int64_t start,
                                                      int64_t end, const text::WordPieceTokenizer& tokenizer,
                                                      const std::string& answer_text) {
  // Comparing ids is comparing the " "-joined piece strings of run_squad (one id per string).
  const std::vector<int32_t> answer = tokenizer.tokenize(answer_text);
  const int64_t n = int64_t(doc_pieces.size());
  for (int64_t s = std::max<int64_t>(start, 0); s <= end && s < n; ++s) {
    for (int64_t e = std::min(end, n - 1); e >= s; --e) {
      if (e - s + 1 == int64_t(answer.size()) && std::equal(answer.begin(), answer.end(), doc_pieces.begin() + s))
        return {s, e};
    }
  }
  return {start, end};
}

std::vector<SquadFeature> squad_features(const std::vector<SquadExample>& examples,
                                         const text::WordPieceTokenizer& tokenizer,
                                         const SquadFeatureOptions& options, bool training) {
  if (options.doc_stride < 1) throw Error("squad: doc_stride is ", options.doc_stride, ", must be at least 1");
  if (options.max_query_length < 1)
    throw Error("squad: max_query_length is ", options.max_query_length, ", must be at least 1");
  const int32_t cls = tokenizer.vocab().cls_id(), sep = tokenizer.vocab().sep_id();
  std::vector<SquadFeature> features;
  for (size_t ei = 0; ei < examples.size(); ++ei) {
    const SquadExample& ex = examples[ei];
    std::vector<int32_t> query = tokenizer.tokenize(ex.question);
    if (int64_t(query.size()) > options.max_query_length) query.resize(size_t(options.max_query_length));

    // Pieces of every word; tok_to_word[piece] = word, word_to_tok[word] = its first piece.
    std::vector<int32_t> doc_pieces;
    std::vector<int64_t> tok_to_word, word_to_tok;
    for (size_t w = 0; w < ex.doc_words.size(); ++w) {
      word_to_tok.push_back(int64_t(doc_pieces.size()));
      for (int32_t id : tokenizer.tokenize(ex.doc_words[w])) {
        tok_to_word.push_back(int64_t(w));
        doc_pieces.push_back(id);
      }
    }
    const int64_t n_pieces = int64_t(doc_pieces.size());

    int64_t tok_start = -1, tok_end = -1;
    if (training && ex.start_word >= 0 && ex.start_word < int64_t(word_to_tok.size())) {
      tok_start = word_to_tok[size_t(ex.start_word)];
      tok_end = ex.end_word + 1 < int64_t(ex.doc_words.size()) ? word_to_tok[size_t(ex.end_word + 1)] - 1 : n_pieces - 1;
      std::tie(tok_start, tok_end) =
          squad_improve_answer_span(doc_pieces, tok_start, tok_end, tokenizer, ex.answers.at(0).text);
    }

    const int64_t max_tokens_for_doc = options.max_seq_length - int64_t(query.size()) - 3;
    if (max_tokens_for_doc < 1)
      throw Error("squad: max_seq_length ", options.max_seq_length, " leaves no room for the document after a ",
                  query.size(), "-piece question and 3 special tokens",
                  Hint("raise --max-seq or lower --max-query (run_squad uses 384 and 64)"));
    // Windows (start, length) over the document pieces.
    std::vector<std::pair<int64_t, int64_t>> spans;
    for (int64_t start = 0; start < n_pieces;) {
      const int64_t length = std::min(n_pieces - start, max_tokens_for_doc);
      spans.emplace_back(start, length);
      if (start + length == n_pieces) break;
      start += std::min(length, options.doc_stride);
    }

    for (size_t si = 0; si < spans.size(); ++si) {
      const auto [doc_start, doc_length] = spans[si];
      SquadFeature f;
      f.example_index = int64_t(ei);
      f.doc_span_index = int64_t(si);
      auto push = [&f](int32_t id, int32_t segment, int64_t word, bool max_context) {
        f.input_ids.push_back(id);
        f.segment_ids.push_back(segment);
        f.token_to_word.push_back(word);
        f.token_is_max_context.push_back(max_context ? 1 : 0);
      };
      push(cls, 0, -1, false);
      for (int32_t id : query) push(id, 0, -1, false);
      push(sep, 0, -1, false);
      for (int64_t i = 0; i < doc_length; ++i) {
        const int64_t piece = doc_start + i;
        push(doc_pieces[size_t(piece)], 1, tok_to_word[size_t(piece)], squad_is_max_context(spans, int64_t(si), piece));
      }
      push(sep, 1, -1, false);
      if (training) {
        const int64_t doc_end = doc_start + doc_length - 1;
        if (tok_start >= doc_start && tok_end <= doc_end && tok_start <= tok_end) {
          const int64_t doc_offset = int64_t(query.size()) + 2;
          f.start_position = tok_start - doc_start + doc_offset;
          f.end_position = tok_end - doc_start + doc_offset;
        }  // else (0, 0): the [CLS] position
      }
      features.push_back(std::move(f));
    }
  }
  return features;
}

// ---- decoding ------------------------------------------------------------------------------

std::string squad_final_text(const std::string& pred_text, const std::string& orig_text, bool lowercase,
                             bool strip_accents) {
  const std::u32string orig = unicode::decode_utf8(orig_text, "SQuAD original text");
  const std::u32string pred = unicode::decode_utf8(pred_text, "SQuAD prediction");
  const std::u32string tok = join(basic_tokenize_cps(orig, lowercase, strip_accents), U' ');
  const size_t start = tok.find(pred);
  if (pred.empty() || start == std::u32string::npos) return orig_text;
  const size_t end = start + pred.size() - 1;
  // Remove the spaces of both strings, remembering where every kept character came from.
  auto strip_spaces = [](const std::u32string& s, std::u32string& ns, std::vector<size_t>& ns_to_s) {
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == ' ') continue;
      ns_to_s.push_back(i);
      ns.push_back(s[i]);
    }
  };
  std::u32string orig_ns, tok_ns;
  std::vector<size_t> orig_ns_to_s, tok_ns_to_s;
  strip_spaces(orig, orig_ns, orig_ns_to_s);
  strip_spaces(tok, tok_ns, tok_ns_to_s);
  if (orig_ns.size() != tok_ns.size()) return orig_text;  // lengths changed (e.g. accents stripped)
  std::unordered_map<size_t, size_t> tok_s_to_ns;
  for (size_t k = 0; k < tok_ns_to_s.size(); ++k) tok_s_to_ns[tok_ns_to_s[k]] = k;
  auto project = [&](size_t tok_pos) -> int64_t {
    auto it = tok_s_to_ns.find(tok_pos);
    if (it == tok_s_to_ns.end() || it->second >= orig_ns_to_s.size()) return -1;
    return int64_t(orig_ns_to_s[it->second]);
  };
  const int64_t orig_start = project(start), orig_end = project(end);
  if (orig_start < 0 || orig_end < 0 || orig_end < orig_start) return orig_text;
  return unicode::encode_utf8(orig.substr(size_t(orig_start), size_t(orig_end - orig_start + 1)));
}

namespace {

// Indexes of the n largest values, best first; ties keep the lower index first (Python's
// stable sort in run_squad's _get_best_indexes).
std::vector<int64_t> best_indexes(const float* logits, int64_t count, int64_t n) {
  std::vector<int64_t> idx(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) idx[size_t(i)] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  if (int64_t(idx.size()) > n) idx.resize(size_t(n));
  return idx;
}

}  // namespace

std::map<std::string, std::string> squad_predict(const std::vector<SquadExample>& examples,
                                                 const std::vector<SquadFeature>& features,
                                                 const std::vector<SquadLogits>& logits,
                                                 const text::WordPieceTokenizer& tokenizer,
                                                 const SquadDecodeOptions& options,
                                                 std::map<std::string, double>* probabilities) {
  if (logits.size() != features.size())
    throw Error("squad_predict: ", logits.size(), " logit rows for ", features.size(), " features");
  const bool lowercase = tokenizer.options().lowercase;
  const bool strip_accents = tokenizer.options().strip_accents.value_or(lowercase);
  std::vector<std::vector<size_t>> by_example(examples.size());
  for (size_t i = 0; i < features.size(); ++i) {
    const int64_t e = features[i].example_index;
    if (e < 0 || size_t(e) >= examples.size())
      throw Error("squad_predict: feature ", i, " belongs to example ", e, " of ", examples.size());
    by_example[size_t(e)].push_back(i);
  }
  struct Candidate {
    size_t feature;
    int64_t start, end;
    double score;
  };
  std::map<std::string, std::string> predictions;
  for (size_t e = 0; e < examples.size(); ++e) {
    const SquadExample& ex = examples[e];
    std::vector<Candidate> prelim;
    for (size_t fi : by_example[e]) {
      const SquadFeature& f = features[fi];
      const int64_t T = int64_t(f.input_ids.size());
      const SquadLogits& lg = logits[fi];
      if (int64_t(lg.start.size()) < T || int64_t(lg.end.size()) < T)
        throw Error("squad_predict: feature ", fi, " has ", T, " positions but ", lg.start.size(), "/", lg.end.size(),
                    " start/end logits");
      for (int64_t s : best_indexes(lg.start.data(), T, options.n_best_size)) {
        for (int64_t en : best_indexes(lg.end.data(), T, options.n_best_size)) {
          if (f.token_to_word[size_t(s)] < 0 || f.token_to_word[size_t(en)] < 0) continue;  // not in the doc
          if (!f.token_is_max_context[size_t(s)]) continue;
          if (en < s || en - s + 1 > options.max_answer_length) continue;
          prelim.push_back({fi, s, en, double(lg.start[size_t(s)]) + double(lg.end[size_t(en)])});
        }
      }
    }
    std::stable_sort(prelim.begin(), prelim.end(), [](const Candidate& a, const Candidate& b) { return a.score > b.score; });
    // The first candidate is the answer: run_squad's n-best list only removes duplicates after it.
    std::string text = "empty";
    if (!prelim.empty()) {
      const Candidate& best = prelim.front();
      const SquadFeature& f = features[best.feature];
      // run_squad: " ".join(pieces).replace(" ##", "").replace("##", ""), whitespace collapsed.
      std::string tok_text;
      for (int64_t i = best.start; i <= best.end; ++i) {
        if (i > best.start) tok_text += ' ';
        tok_text += tokenizer.vocab().token(f.input_ids[size_t(i)]);
      }
      tok_text = replace_all(replace_all(tok_text, " ##", ""), "##", "");
      tok_text = unicode::encode_utf8(join(python_split(unicode::decode_utf8(tok_text)), U' '));
      std::string orig_text;
      for (int64_t w = f.token_to_word[size_t(best.start)]; w <= f.token_to_word[size_t(best.end)]; ++w) {
        if (!orig_text.empty()) orig_text += ' ';
        orig_text += ex.doc_words[size_t(w)];
      }
      text = squad_final_text(tok_text, orig_text, lowercase, strip_accents);
    }
    predictions[ex.id] = text;
    if (probabilities) {
      // run_squad's n-best list: candidates in score order, one per answer (spans of the same
      // original words give the same text: "rock" + "##ville" and "rockville"), n_best_size of them.
      std::set<std::pair<int64_t, int64_t>> seen;
      double sum = 0;
      for (const Candidate& c : prelim) {
        if (seen.size() == size_t(options.n_best_size)) break;
        const SquadFeature& f = features[c.feature];
        if (!seen.insert({f.token_to_word[size_t(c.start)], f.token_to_word[size_t(c.end)]}).second) continue;
        sum += std::exp(c.score - prelim.front().score);
      }
      (*probabilities)[ex.id] = prelim.empty() ? 0.0 : 1.0 / sum;
    }
  }
  return predictions;
}

// ---- evaluate-v1.1.py ----------------------------------------------------------------------

std::string squad_normalize_answer(const std::string& s) {
  const std::u32string in = unicode::decode_utf8(s, "SQuAD answer");
  // lower, then remove string.punctuation (ASCII only).
  std::u32string lowered;
  for (char32_t c : in) unicode::append_lowercase(c, lowered);
  std::u32string no_punct;
  for (char32_t c : lowered)
    if (!(c < 0x80 && is_bert_punctuation(c))) no_punct.push_back(c);
  // re.sub(r'\b(a|an|the)\b', ' ', text): whole words only, judged on the unmodified text.
  std::u32string no_articles;
  const size_t n = no_punct.size();
  for (size_t i = 0; i < n;) {
    if (i == 0 || !is_python_word(no_punct[i - 1])) {
      size_t matched = 0;
      for (std::u32string_view article : {std::u32string_view(U"a"), std::u32string_view(U"an"), std::u32string_view(U"the")}) {
        const size_t end = i + article.size();
        if (end <= n && std::u32string_view(no_punct).substr(i, article.size()) == article &&
            (end == n || !is_python_word(no_punct[end]))) {
          matched = article.size();
          break;
        }
      }
      if (matched) {
        no_articles.push_back(' ');
        i += matched;
        continue;
      }
    }
    no_articles.push_back(no_punct[i++]);
  }
  return unicode::encode_utf8(join(python_split(no_articles), U' '));
}

double squad_exact_match(const std::string& prediction, const std::string& ground_truth) {
  return squad_normalize_answer(prediction) == squad_normalize_answer(ground_truth) ? 1.0 : 0.0;
}

double squad_f1(const std::string& prediction, const std::string& ground_truth) {
  const auto pred = python_split(unicode::decode_utf8(squad_normalize_answer(prediction)));
  const auto truth = python_split(unicode::decode_utf8(squad_normalize_answer(ground_truth)));
  // Counter(pred) & Counter(truth): the multiset intersection.
  std::map<std::u32string, int64_t> truth_counts;
  for (const auto& t : truth) ++truth_counts[t];
  int64_t same = 0;
  for (const auto& p : pred) {
    auto it = truth_counts.find(p);
    if (it != truth_counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0.0;
  const double precision = double(same) / double(pred.size());
  const double recall = double(same) / double(truth.size());
  return 2 * precision * recall / (precision + recall);
}

SquadScore squad_evaluate(const std::vector<SquadExample>& examples,
                          const std::map<std::string, std::string>& predictions) {
  SquadScore score;
  double em = 0, f1 = 0;
  for (const SquadExample& ex : examples) {
    ++score.total;
    auto it = predictions.find(ex.id);
    if (it == predictions.end()) {
      ++score.unanswered;
      continue;
    }
    double best_em = 0, best_f1 = 0;
    for (const SquadAnswer& a : ex.answers) {
      best_em = std::max(best_em, squad_exact_match(it->second, a.text));
      best_f1 = std::max(best_f1, squad_f1(it->second, a.text));
    }
    em += best_em;
    f1 += best_f1;
  }
  if (score.total > 0) {
    score.exact_match = 100.0 * em / double(score.total);
    score.f1 = 100.0 * f1 / double(score.total);
  }
  return score;
}

std::string squad_predictions_json(const std::map<std::string, std::string>& predictions) {
  json j = json::object();
  for (const auto& [id, text] : predictions) j[id] = text;
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace unmask::finetune
