// Writes tests/js/corpus.txt: the WordPiece parity corpus (deterministic; rerun after edits).
//
//   node tests/js/make_corpus.mjs [/usr/share/unicode/UnicodeData.txt]
//
// One test case per line (so no '\n' inside a case; every other control character appears
// raw). Sections: hand-written prose and edge cases, per-script samples, then seeded random
// lines that sweep the Unicode tables: every punctuation, nonspacing mark, cased letter,
// decomposable, whitespace and format character assigned in the Unicode version of
// UnicodeData.txt (Debian unicode-data, the same data src/data/text/unicode_tables.cc is
// generated from). Code points newer than that file are left out on purpose: Node's ICU
// may know them, our tables do not; so are the few whose properties changed between that
// Unicode version and Node's (unicode_versions.mjs lists them).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { unicodeVersionDifferences } from './unicode_versions.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const ucdPath = process.argv[2] ?? '/usr/share/unicode/UnicodeData.txt';

// mulberry32: a tiny seeded PRNG so the corpus is identical on every run.
let seed = 0x5eed1234;
function random() {
  seed = (seed + 0x6D2B79F5) | 0;
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const pick = (list) => list[Math.floor(random() * list.length)];
const cp = (n) => String.fromCodePoint(n);

// ---- Unicode 15 repertoire from UnicodeData.txt ---------------------------------------
const changed = unicodeVersionDifferences(path.dirname(ucdPath));
const categoryOf = new Map();  // code point -> general category, assigned only
const lowerOf = new Set();      // code points with a lowercase mapping
const decomposable = new Set(); // code points with a canonical decomposition
{
  let rangeFirst = null;
  for (const line of fs.readFileSync(ucdPath, 'utf8').split('\n')) {
    if (!line) continue;
    const f = line.split(';');
    const code = parseInt(f[0], 16);
    if (f[1].endsWith(', First>')) { rangeFirst = code; continue; }
    const first = f[1].endsWith(', Last>') ? rangeFirst : code;
    // Sample large ranges (CJK, Hangul, Tangut, private use) sparsely.
    const step = code - first > 256 ? 97 : 1;
    for (let c = first; c <= code; c += step) categoryOf.set(c, f[2]);
    if (changed.has(code)) continue;
    if (f[13]) lowerOf.add(code);
    if (f[5] && !f[5].startsWith('<')) decomposable.add(code);
  }
}
const assigned = [...categoryOf.keys()].filter((c) => categoryOf.get(c) !== 'Cs' && !changed.has(c));
const withCategory = (pred) => assigned.filter((c) => pred(categoryOf.get(c)));

const lines = [];
const add = (s) => {
  if (s.includes('\n')) throw new Error(`corpus line ${lines.length + 1} contains a newline`);
  lines.push(s);
};

// ---- 1. Prose and hand-picked edge cases ------------------------------------------------
const prose = [
  'The quick brown fox jumps over the lazy dog.',
  'BERT uses WordPiece: a greedy, longest-match-first sub-word tokenizer.',
  "Don't stop believin' -- it's 3:45 p.m. on Tuesday, isn't it?",
  'Prices rose 12.5% (from $1,234.56 to $1,388.88) in Q3 2023!',
  'Email me at jane.doe+bert@example.com or visit https://example.org/path?q=1&r=two#frag.',
  'He said, "Unbelievable!" and she replied: \u201cIndeed\u2026\u201d',
  'Transformers-based models (e.g. BERT, RoBERTa, DistilBERT) dominate NLP benchmarks.',
  'In 1905, Einstein published four groundbreaking papers; relativity was one of them.',
  'the the the the the the the the the the',
  'UNAFFABLE unaffable Unaffable unaffableness antidisestablishmentarianism',
  'C++20 concepts, std::span<const int>, and a->b->c: obj.method(arg1, arg2);',
  'x = (a + b) * c / d - e ^ f | g & h ~ i < j > k = l @ m # n $ o % p',
  '',
  ' ',
  '   leading and trailing spaces   ',
  '\ttabs\tbetween\twords\t',
  'multiple     spaces     between     words',
  'hi\u{1F600}',
  'hi \u{1F600}',
  '\u{1F600}\u{1F601}\u{1F602} emoji only',
  'family: \u{1F468}\u200D\u{1F469}\u200D\u{1F467}\u200D\u{1F466} (ZWJ sequence)',
  'flag: \u{1F1FA}\u{1F1F8} and skin tone: \u{1F44D}\u{1F3FD} and keycap: 1\uFE0F\u20E3',
  'zero\u200Bwidth space joins words',
  'zero\u200Dwidth joiner and zero\u200Cwidth non-joiner',
  '\uFEFFbyte order mark at start',
  'soft\u00ADhyphen in the middle of soft\u00ADware',
  'non\u00A0breaking\u00A0space and narrow\u202Fno-break',
  'em\u2003space, thin\u2009space, ideographic\u3000space',
  'line\u2028separator and paragraph\u2029separator',
  'next\u0085line is a control character',
  'replacement \uFFFD character and NUL \u0000 character',
  'combining: e\u0301 a\u0300 o\u0308 n\u0303 c\u0327 A\u030A',
  'precomposed: \u00E9 \u00E0 \u00F6 \u00F1 \u00E7 \u00C5',
  'stacked marks: a\u0301\u0302\u0303\u0304\u0305 and q\u0323\u0307',
  'lonely combining mark: \u0301 and \u0301\u0301',
  '\u0130stanbul \u0130I \u0131i dotted and dotless',
  'ligatures: \uFB01nance \uFB02ow \uFB00 \uFB03 \uFB04 \u00C6sop \u0152uvre \u0133',
  'full-width: \uFF28\uFF45\uFF4C\uFF4C\uFF4F\uFF0C\u3000\uFF37\uFF4F\uFF52\uFF4C\uFF44\uFF01 \uFF11\uFF12\uFF13',
  'math: \u2200x\u2208\u211D, \u2203y: x\u00B2 + y\u00B2 \u2264 1 \u21D2 \u2211\u1D62 \u222B f(x)dx \u2248 \u03C0',
  'symbols: \u00A9 \u00AE \u2122 \u20AC \u00A3 \u00A5 \u00A7 \u00B6 \u2020 \u2021 \u2030 \u00B0',
  'quotes: \u00AB guillemets \u00BB \u201Edouble\u201C \u201Asingle\u2018 \u300Cbracket\u300D \u300Ejapanese\u300F',
  'dashes: en\u2013dash em\u2014dash minus\u2212sign hyphen\u2010here',
  'numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 3.14159 -42 +7 1e10 0x1F 1,000,000',
  'roman \u2160 \u2161 \u2162 \u216B and circled \u2460 \u2461 \u2462 and fractions \u00BD \u00BC \u2153',
  '[MASK]',
  '[CLS] [SEP]',
  'The capital of France is [MASK].',
  'a[MASK]b[SEP]c[CLS]d[PAD]e[UNK]f',
  '[cls] lowercase cls is NOT special [sep] [mask] [pad] [unk]',
  '[MASK][MASK][MASK] consecutive specials',
  '[ MASK ] [MASK [MASK]] [[SEP]] [SEP',
  '  [MASK]  spaced  [SEP]  ',
  '\u0130[MASK]\u0130 specials between capital I with dot',
  '\u03A3[MASK] \u039F\u0394\u039F\u03A3[SEP] ending sigma before special',
  'Greek: \u039F\u0394\u039F\u03A3 \u03BF\u03B4\u03BF\u03C2 \u0391\u0398\u0397\u039D\u0391\u03A3 \u03A3\u03A3 \u03A3 \u0391\u03A3.\u0391 \u03A3\u03BF\u03C6\u03AF\u03B1',
  'https://en.wikipedia.org/wiki/BERT_(language_model)?action=history&offset=20240101',
  'file:///home/user/My%20Documents/report_v2.final.pdf',
  'user@host:~$ ls -la /usr/share/unicode | grep -i "data"',
  '<html><body class="main">Hello &amp; welcome &lt;3</body></html>',
  '{"key": [1, 2, 3], "nested": {"a": null, "b": true}}',
  'a'.repeat(100),
  'a'.repeat(101),
  'b'.repeat(99) + '\u0301',
  'x'.repeat(100) + '\u200B',
  'supercalifragilisticexpialidocious'.repeat(4),
  ('hello ' + 'a'.repeat(150) + ' world'),
  '\u00E9'.repeat(101),
  'e\u0301'.repeat(60),
  'CJK ext B: \u{20000}\u{20001} \u{2A6D6}abc \u{2F800}',
  'compatibility ideographs: \uF900\uF901\uFA0E\uFA10',
  'radicals \u2F00\u2F01 and \u2E80 are not ideographs',
];
prose.forEach(add);

// Every control character U+0001..U+001F (newline excepted) and DEL, raw, between letters.
for (let c = 1; c < 0x20; ++c) if (c !== 0x0A) add(`ctrl${c}:a${cp(c)}b ${cp(c)}word${cp(c)}`);
add(`del:a\u007Fb c1:\u0080\u0085\u009F end`);
add(`formats: a\u00ADb c\u0600d e\u061Cf g\u180Eh i\u200Ej k\u202Al m\u2066n o\u206Fp q\uFFF9r s\u{E0001}t`);
add(`private use: \uE000 \uF8FF a\uE000b \u{F0000} \u{10FFFD}`);
add(`noncharacters: \uFDD0 \uFFFE \uFFFF a\uFDD0b`);

// ---- 2. Scripts ---------------------------------------------------------------------------
const scripts = {
  latin: ['Cr\u00E8me br\u00FBl\u00E9e', 'na\u00EFve fa\u00E7ade r\u00E9sum\u00E9', 'Stra\u00DFe \u00FCber M\u00FCnchen',
    'Za\u017C\u00F3\u0142\u0107 g\u0119\u015Bl\u0105 ja\u017A\u0144', 'Ti\u1EBFng Vi\u1EC7t c\u00F3 d\u1EA5u',
    '\u00C5ngstr\u00F6m \u00D8resund \u00C6r\u00F8', 'se\u00F1or ni\u00F1o a\u00F1o', '\u0218tefan \u021Aara \u0102',
    '\u00C7a\u011Flayan \u015Eeker I\u011Fd\u0131r', 'Dvo\u0159\u00E1k \u017Dlu\u0165ou\u010Dk\u00FD k\u016F\u0148'],
  greek: ['\u039A\u03B1\u03BB\u03B7\u03BC\u03AD\u03C1\u03B1 \u03BA\u03CC\u03C3\u03BC\u03B5', '\u0391\u03B8\u03AE\u03BD\u03B1 \u0398\u03B5\u03C3\u03C3\u03B1\u03BB\u03BF\u03BD\u03AF\u03BA\u03B7',
    '\u1F08\u03C1\u03C7\u1F74 \u1F00\u03BD\u03B4\u03C1\u1F78\u03C2 \u1F14\u03C1\u03B3\u03BF\u03BD', '\u039F\u0394\u03A5\u03A3\u03A3\u0395\u03A5\u03A3 \u039B\u039F\u0393\u039F\u03A3',
    '\u03B1\u0345 \u1FB3 \u1FBC \u1F88 \u0390 \u03B0'],
  cyrillic: ['\u041F\u0440\u0438\u0432\u0435\u0442, \u043C\u0438\u0440!', '\u0401\u043B\u043A\u0430 \u0439\u043E\u0433\u0443\u0440\u0442 \u0419',
    '\u0423\u043A\u0440\u0430\u0457\u043D\u0430 \u0491\u0430\u043D\u043E\u043A \u0404', '\u0421\u0440\u0431\u0438\u0458\u0430 \u0409\u0443\u0431\u0430 \u040B'],
  arabic: ['\u0645\u0631\u062D\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645', '\u0627\u0644\u0644\u064F\u0651\u063A\u064E\u0629\u064F \u0627\u0644\u0639\u064E\u0631\u064E\u0628\u0650\u064A\u064E\u0651\u0629\u064F',
    '\u061F \u060C \u061B \u066A \u06D4 \u0660\u0661\u0662', '\u0641\u0627\u0631\u0633\u06CC \u067E\u06AF\u0686\u0698'],
  hebrew: ['\u05E9\u05DC\u05D5\u05DD \u05E2\u05D5\u05DC\u05DD', '\u05D1\u05B0\u05BC\u05E8\u05B5\u05D0\u05E9\u05B4\u05C1\u05D9\u05EA \u05D1\u05B8\u05BC\u05E8\u05B8\u05D0',
    '\u05F3 \u05F4 \u05BE \uFB1D \uFB2A'],
  devanagari: ['\u0928\u092E\u0938\u094D\u0924\u0947 \u0926\u0941\u0928\u093F\u092F\u093E', '\u0939\u093F\u0928\u094D\u0926\u0940 \u092D\u093E\u0937\u093E\u0964',
    '\u0915\u093C \u0958 \u0929 \u0933\u093C \u0970 \u0966\u0967\u0968', '\u0938\u0902\u0938\u094D\u0915\u0943\u0924\u092E\u094D \u0965'],
  thai: ['\u0E2A\u0E27\u0E31\u0E2A\u0E14\u0E35\u0E04\u0E23\u0E31\u0E1A', '\u0E20\u0E32\u0E29\u0E32\u0E44\u0E17\u0E22 \u0E51\u0E52\u0E53 \u0E2F \u0E5A'],
  cjk: ['\u4F60\u597D\uFF0C\u4E16\u754C\uFF01', '\u6211\u7231\u5317\u4EAC\u5929\u5B89\u95E8\u3002', '\u4E2D\u6587\u5B57abc\u6F22\u5B57',
    '\u3400\u3401 \u4DBF \u9FFF \u9FA5', '\u300C\u5F15\u7528\u300D\u3001\u300A\u66F8\u540D\u300B\uFF1F'],
  japanese: ['\u3053\u3093\u306B\u3061\u306F\u4E16\u754C', '\u30AB\u30BF\u30AB\u30CA\u3068\u3072\u3089\u304C\u306A',
    '\u30AC\u30AE\u30B0 \u304C\u304E\u3050 \u30D1\u30D4\u30D7', '\uFF76\uFF80\uFF76\uFF85 \uFF8A\uFF9F \u30FC\u30FB'],
  korean: ['\uC548\uB155\uD558\uC138\uC694 \uC138\uACC4', '\uD55C\uAD6D\uC5B4 \uD14D\uC2A4\uD2B8', '\u1100\u1161\u11A8 \u3131\u314F \uAC00\uD7A3'],
  other: ['\u10E5\u10D0\u10E0\u10D7\u10E3\u10DA\u10D8 Georgian', '\u0540\u0561\u0575\u0565\u0580\u0565\u0576 Armenian',
    '\u12A0\u121B\u122D\u129B Ethiopic', '\u0F56\u0F7C\u0F51\u0F0B\u0F61\u0F72\u0F42 Tibetan', '\u0DC3\u0DD2\u0D82\u0DC4\u0DBD Sinhala',
    '\u0BA4\u0BAE\u0BBF\u0BB4\u0BCD Tamil', '\u0C24\u0C46\u0C32\u0C41\u0C17\u0C41 Telugu', '\u0995\u09BE\u09B0\u09CD\u09A4\u09BF\u0995 Bengali',
    '\u1780\u1798\u17D2\u1796\u17BB\u1787\u17B6 Khmer', '\u13E3\u13B3\u13A9 Cherokee \uAB70\u13A0', '\u{10400}\u{10428} Deseret',
    '\u{1D400}\u{1D41A} math bold \u{1D7CE}', '\u2C00\u2C30 Glagolitic', '\u10A0\u2D00 Georgian Asomtavruli'],
};
for (const [name, samples] of Object.entries(scripts)) {
  for (const s of samples) add(`${name}: ${s}`);
  for (const s of samples) add(s.toUpperCase());
}

// ---- 3. Random prose from a word list ------------------------------------------------------
const words = ('time person year way day thing man world life hand part child eye woman place ' +
  'work week case point government company number group problem fact be have do say get make ' +
  'go know take see come think look want give use find tell ask seem feel try leave call good ' +
  'new first last long great little own other old right big high different small large next ' +
  'early young important few public bad same able tokenization embeddings transformer attention ' +
  'pretraining finetuning unbelievably counterintuitive misunderstanding electroencephalography').split(' ');
const punct = ['.', ',', '!', '?', ';', ':', '...', ' -', '\u2014', "'s", '"', '(', ')'];
for (let i = 0; i < 300; ++i) {
  const n = 4 + Math.floor(random() * 30);
  let s = '';
  for (let k = 0; k < n; ++k) {
    let w = pick(words);
    const r = random();
    if (r < 0.1) w = w[0].toUpperCase() + w.slice(1);
    else if (r < 0.13) w = w.toUpperCase();
    s += (k ? ' ' : '') + w + (random() < 0.15 ? pick(punct) : '');
  }
  add(s);
}

// ---- 4. Table sweeps: each listed code point as its own word and glued to letters --------
function sweep(label, codes, perLine) {
  for (let i = 0; i < codes.length; i += perLine) {
    const chunk = codes.slice(i, i + perLine);
    const spaced = chunk.map((c) => cp(c)).join(' ');
    const glued = chunk.map((c) => 'a' + cp(c) + 'b').join(' ');
    add(`${label} ${spaced} | ${glued}`);
  }
}
sweep('P', withCategory((g) => g[0] === 'P'), 40);
sweep('Mn', withCategory((g) => g === 'Mn'), 40);
sweep('Mc/Me', withCategory((g) => g === 'Mc' || g === 'Me'), 40);
sweep('Cf/Zs/Zl/Zp', withCategory((g) => g === 'Cf' || g[0] === 'Z'), 20);
sweep('Cc', withCategory((g) => g === 'Cc').filter((c) => c !== 0x0A), 20);
sweep('Lower', [...lowerOf].sort((a, b) => a - b), 40);
sweep('Decomposable', [...decomposable].sort((a, b) => a - b), 40);
sweep('Lt/Lm', withCategory((g) => g === 'Lt' || g === 'Lm'), 40);
sweep('S', withCategory((g) => g[0] === 'S').filter((_, i) => i % 3 === 0), 60);
sweep('N', withCategory((g) => g[0] === 'N').filter((_, i) => i % 2 === 0), 60);

// ---- 5. Random code point soup, seeded ---------------------------------------------------
const letters = withCategory((g) => g[0] === 'L');
const everything = assigned;
for (let i = 0; i < 250; ++i) {
  const n = 5 + Math.floor(random() * 40);
  let s = '';
  for (let k = 0; k < n; ++k) {
    const r = random();
    if (r < 0.15) s += ' ';
    else if (r < 0.35) s += pick('abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,-');
    else if (r < 0.6) s += cp(pick(letters));
    else s += cp(pick(everything));
  }
  add(s.replace(/\n/g, ' '));
}

// ---- 6. Long lines ------------------------------------------------------------------------
for (let i = 0; i < 6; ++i) {
  let s = '';
  while (s.length < 3000 + i * 1000) s += pick(prose.slice(0, 12)) + ' ' + pick(lines.slice(100, 140)) + ' ';
  add(s);
}

const out = path.join(here, 'corpus.txt');
fs.writeFileSync(out, lines.join('\n') + '\n');
console.log(`wrote ${out}: ${lines.length} lines`);
