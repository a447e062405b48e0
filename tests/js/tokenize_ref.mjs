// Reference WordPiece ids from tokenizers.js (@huggingface/transformers) for the C++ parity
// test (tests/test_wordpiece.cc, WordPieceParity.*).
//
//   node tests/js/tokenize_ref.mjs VOCAB CORPUS OUTDIR
//
// Builds tokenizer.json + tokenizer_config.json for bert-base-uncased from VOCAB in a temp
// dir (and a cased variant: lowercase false, strip_accents null, same vocab), loads them
// offline with AutoTokenizer, and writes to OUTDIR:
//   expected_uncased.txt, expected_cased.txt   one line per corpus line: ids with [CLS]/[SEP]
//   expected_pairs_uncased.txt                 one line per pair (corpus lines 2k, 2k+1):
//                                              "ids<TAB>token_type_ids"
//
// HF alignment patches. tokenizers.js 3.x deviates from Hugging Face's BertTokenizer (Python)
// and BertTokenizerFast (Rust) in three places; the reference applies the HF behaviour, and
// every line where stock tokenizers.js gives other ids must be explained by one of them
// (checked below; the script exits 1 otherwise):
//   1. CJK padding walks UTF-16 code units, so ideographs beyond the BMP (U+20000..) are not
//      padded; HF walks code points.
//   2. Clean-up drops Cc Cf Co Cs but not Cn (unassigned); HF drops every C* category.
//   3. Lowercasing calls String.toLowerCase() on the whole text, which applies Final_Sigma
//      (word-final U+03A3 -> U+03C2); HF lowercases one code point at a time (-> U+03C3).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AutoTokenizer, env } from '@huggingface/transformers';

const [vocabPath, corpusPath, outDir] = process.argv.slice(2);
if (!vocabPath || !corpusPath || !outDir) {
  console.error('usage: node tokenize_ref.mjs VOCAB CORPUS OUTDIR');
  process.exit(2);
}

function tokenizerFiles(vocabTokens, lowercase) {
  const vocab = {};
  vocabTokens.forEach((token, id) => { vocab[token] = id; });  // last duplicate wins, as HF
  const specials = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].filter((t) => t in vocab);
  const special = (id, type_id) => ({ SpecialToken: { id, type_id } });
  const sequence = (id, type_id) => ({ Sequence: { id, type_id } });
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: specials.map((content) => ({
      id: vocab[content], content, single_word: false, lstrip: false, rstrip: false,
      normalized: false, special: true,
    })),
    normalizer: {
      type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true,
      strip_accents: null, lowercase,
    },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: {
      type: 'TemplateProcessing',
      single: [special('[CLS]', 0), sequence('A', 0), special('[SEP]', 0)],
      pair: [special('[CLS]', 0), sequence('A', 0), special('[SEP]', 0), sequence('B', 1),
        special('[SEP]', 1)],
      special_tokens: {
        '[CLS]': { id: '[CLS]', ids: [vocab['[CLS]']], tokens: ['[CLS]'] },
        '[SEP]': { id: '[SEP]', ids: [vocab['[SEP]']], tokens: ['[SEP]'] },
      },
    },
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: {
      type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##',
      max_input_chars_per_word: 100, vocab,
    },
  };
  const tokenizerConfig = {
    tokenizer_class: 'BertTokenizer', do_lower_case: lowercase, model_max_length: 512,
    unk_token: '[UNK]', sep_token: '[SEP]', pad_token: '[PAD]', cls_token: '[CLS]',
    mask_token: '[MASK]', clean_up_tokenization_spaces: true,
  };
  return { tokenizerJson, tokenizerConfig };
}

// Gives one BertNormalizer instance Hugging Face's behaviour (see the header comment).
function alignWithHuggingFace(normalizer) {
  normalizer._tokenize_chinese_chars = function (text) {
    let out = '';
    for (const ch of text) {  // code points, not UTF-16 units
      const c = ch.codePointAt(0);
      const cjk = (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
        (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
        (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
        (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
      out += cjk ? ` ${ch} ` : ch;
    }
    return out;
  };
  normalizer._is_control = function (ch) {
    if (ch === '\t' || ch === '\n' || ch === '\r') return false;
    return /^\p{C}$/u.test(ch);  // Cc Cf Cs Co and Cn
  };
  const config = normalizer.config;
  normalizer.normalize = function (text) {
    if (config.clean_text) text = this._clean_text(text);
    if (config.handle_chinese_chars) text = this._tokenize_chinese_chars(text);
    if (config.lowercase) {
      text = Array.from(text, (ch) => ch.toLowerCase()).join('');  // no Final_Sigma context
      if (config.strip_accents !== false) text = this.stripAccents(text);
    } else if (config.strip_accents) {
      text = this.stripAccents(text);
    }
    return text;
  };
}

// Which documented reasons could make stock tokenizers.js tokenize `line` differently.
const deviationTriggers = {
  'supplementary CJK': /[\u{20000}-\u{2A6DF}\u{2A700}-\u{2CEAF}\u{2F800}-\u{2FA1F}]/u,
  'unassigned code point': /\p{Cn}/u,
  'capital sigma': /\u03A3/u,
};
const triggersOf = (line) => Object.keys(deviationTriggers).filter((k) => deviationTriggers[k].test(line));

async function loadTokenizer(dir, name, vocabTokens, lowercase) {
  const { tokenizerJson, tokenizerConfig } = tokenizerFiles(vocabTokens, lowercase);
  fs.mkdirSync(path.join(dir, name), { recursive: true });
  fs.writeFileSync(path.join(dir, name, 'tokenizer.json'), JSON.stringify(tokenizerJson));
  fs.writeFileSync(path.join(dir, name, 'tokenizer_config.json'), JSON.stringify(tokenizerConfig));
  return AutoTokenizer.from_pretrained(name);
}

const vocabText = fs.readFileSync(vocabPath, 'utf8');
const vocabTokens = vocabText.split('\n').map((t) => t.replace(/\r$/, ''));
if (vocabTokens.at(-1) === '') vocabTokens.pop();
const corpusText = fs.readFileSync(corpusPath, 'utf8');
const lines = corpusText.split('\n');
if (lines.at(-1) === '') lines.pop();

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'unmask-wordpiece-'));
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = tmp + path.sep;
env.useBrowserCache = false;
env.useFSCache = false;

const configs = [
  { name: 'uncased', lowercase: true },
  { name: 'cased', lowercase: false },
];
let unexplained = 0;
fs.mkdirSync(outDir, { recursive: true });
for (const { name, lowercase } of configs) {
  const stock = await loadTokenizer(tmp, `bert-${name}-stock`, vocabTokens, lowercase);
  const aligned = await loadTokenizer(tmp, `bert-${name}`, vocabTokens, lowercase);
  alignWithHuggingFace(aligned.normalizer);

  const encode = (tok, a, b = null) => tok(a, { text_pair: b, return_tensor: false,
    return_token_type_ids: true, add_special_tokens: true });
  const out = [];
  let deviations = 0;
  const byTrigger = {};
  lines.forEach((line, i) => {
    const ids = encode(aligned, line).input_ids;
    out.push(ids.join(' '));
    const stockIds = encode(stock, line).input_ids;
    if (stockIds.join(' ') !== ids.join(' ')) {
      ++deviations;
      const triggers = triggersOf(line);
      for (const t of triggers) byTrigger[t] = (byTrigger[t] ?? 0) + 1;
      if (triggers.length === 0) {
        ++unexplained;
        console.error(`${name} line ${i + 1}: stock tokenizers.js differs without a known ` +
          `cause:\n  stock:   ${stockIds.join(' ')}\n  aligned: ${ids.join(' ')}`);
      }
    }
  });
  fs.writeFileSync(path.join(outDir, `expected_${name}.txt`), out.join('\n') + '\n');
  console.log(`${name}: ${lines.length} lines; stock tokenizers.js differs on ${deviations}, ` +
    `lines holding: ${JSON.stringify(byTrigger)}`);

  if (lowercase) {
    const pairs = [];
    for (let i = 0; i + 1 < lines.length; i += 2) {
      const e = encode(aligned, lines[i], lines[i + 1]);
      pairs.push(`${e.input_ids.join(' ')}\t${e.token_type_ids.join(' ')}`);
    }
    fs.writeFileSync(path.join(outDir, `expected_pairs_${name}.txt`), pairs.join('\n') + '\n');
    console.log(`${name} pairs: ${pairs.length}`);
  }
}
fs.rmSync(tmp, { recursive: true, force: true });
if (unexplained) {
  console.error(`${unexplained} line(s) differ between stock and HF-aligned tokenizers.js ` +
    'for no documented reason');
  process.exit(1);
}
