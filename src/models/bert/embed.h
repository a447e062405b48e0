// models/bert/embed.h: sentence embeddings from a BERT encoder, batched and packed.
//
//   Tensor e = embed_texts(ctx, model, tokenizer, lines, {.pooling = Pooling::mean});  // [N, C] f32
//
// Each text is encoded alone ([CLS] text [SEP], truncated to max_length), the texts of a batch
// run packed (no work on padding), and each is pooled from last_hidden_state: `cls` takes the
// [CLS] row (what BERT's pooler and classifiers start from; the pooler's dense + tanh is not
// applied), `mean` averages every token row of the text, [CLS] and [SEP] included (Sentence-
// Transformers' mean pooling with the attention mask). Texts are sorted by length into batches
// and the rows written back in input order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/text/wordpiece.h"
#include "unmask/bert.h"

namespace unmask {

enum class Pooling : uint8_t { cls, mean };

struct EmbedOptions {
  Pooling pooling = Pooling::cls;
  int64_t batch = 32;       // texts per forward
  int64_t max_length = 0;   // 0 = the model's max_position_embeddings
};

struct EmbedResult {
  Tensor embeddings;        // [N, C] f32
  int64_t truncated = 0;    // texts cut to max_length
  int64_t tokens = 0;       // tokens run
};

EmbedResult embed_texts(Context& ctx, const BertModel& model, const text::WordPieceTokenizer& tokenizer,
                        const std::vector<std::string>& texts, const EmbedOptions& options = {});

}  // namespace unmask
