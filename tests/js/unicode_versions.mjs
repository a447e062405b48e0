// Which code points does Node's ICU treat differently from Debian's unicode-data, for the
// properties the BERT normalizer reads?
//
//   node tests/js/unicode_versions.mjs [/usr/share/unicode]   # prints the differences
//
// src/data/text/unicode_tables.cc is generated from Debian's UCD (Unicode 15.0.0 on Debian 12);
// Node 20.20 ships ICU 78 (Unicode 17.0). Code points first assigned after 15.0 are simply
// unassigned (Cn, deleted by clean-up) in our tables. This script finds the code points
// ASSIGNED in the UCD whose relevant behaviour changed: nonspacing mark (dropped when
// stripping accents), punctuation (split), control/format (deleted), whitespace, per-code-
// point lowercase and NFD. make_corpus.mjs keeps them out of the parity corpus; the list is
// recorded in src/data/text/wordpiece.h.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/// Returns Map(code point -> description of the difference) for code points assigned in the UCD.
export function unicodeVersionDifferences(ucdDir = '/usr/share/unicode') {
  const category = new Map();
  const lower = new Map();
  const decomposition = new Map();
  let rangeFirst = null;
  for (const line of fs.readFileSync(path.join(ucdDir, 'UnicodeData.txt'), 'utf8').split('\n')) {
    if (!line) continue;
    const f = line.split(';');
    const code = parseInt(f[0], 16);
    if (f[1].endsWith(', First>')) { rangeFirst = code; continue; }
    const first = f[1].endsWith(', Last>') ? rangeFirst : code;
    for (let c = first; c <= code; ++c) category.set(c, f[2]);
    if (f[13]) lower.set(code, [parseInt(f[13], 16)]);
    if (f[5] && !f[5].startsWith('<')) decomposition.set(code, f[5].split(' ').map((x) => parseInt(x, 16)));
  }
  for (const line of fs.readFileSync(path.join(ucdDir, 'SpecialCasing.txt'), 'utf8').split('\n')) {
    const data = line.split('#')[0].trim();
    if (!data) continue;
    const f = data.split(';').map((x) => x.trim()).filter((x) => x !== '');
    if (f.length > 4) continue;  // conditional mapping
    const code = parseInt(f[0], 16);
    const mapping = f[1].split(' ').map((x) => parseInt(x, 16));
    if (mapping.length === 1 && mapping[0] === code) lower.delete(code);
    else lower.set(code, mapping);
  }
  const whiteSpace = new Set();
  for (const line of fs.readFileSync(path.join(ucdDir, 'PropList.txt'), 'utf8').split('\n')) {
    const m = /^([0-9A-F]+)(?:\.\.([0-9A-F]+))?\s*;\s*White_Space\b/.exec(line);
    if (!m) continue;
    for (let c = parseInt(m[1], 16); c <= parseInt(m[2] ?? m[1], 16); ++c) whiteSpace.add(c);
  }
  const nfd = (c) => (decomposition.has(c) ? decomposition.get(c).flatMap(nfd) : [c]);

  const differences = new Map();
  for (const [c, gc] of category) {
    if (gc === 'Cs') continue;  // not representable in UTF-8 input
    const ch = String.fromCodePoint(c);
    const found = [];
    const check = (name, ours, theirs) => { if (ours !== theirs) found.push(`${name} ${ours}->${theirs}`); };
    check('Mn', gc === 'Mn', /^\p{Mn}$/u.test(ch));
    check('P', gc[0] === 'P', /^\p{P}$/u.test(ch));
    check('C', gc[0] === 'C', /^\p{C}$/u.test(ch));
    check('White_Space', whiteSpace.has(c), /^\s$/u.test(ch) && c !== 0xFEFF);
    const ourLower = String.fromCodePoint(...(lower.get(c) ?? [c]));
    check('lower', ourLower, ch.toLowerCase());
    const isHangul = c >= 0xAC00 && c <= 0xD7A3;
    if (!isHangul) check('NFD', String.fromCodePoint(...nfd(c)), ch.normalize('NFD'));
    if (found.length) differences.set(c, found.join(', '));
  }
  return differences;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const ucdDir = process.argv[2] ?? '/usr/share/unicode';
  const differences = unicodeVersionDifferences(ucdDir);
  console.log(`Node ${process.versions.node}, ICU ${process.versions.icu}, Unicode ` +
    `${process.versions.unicode}; UCD in ${ucdDir}: ${differences.size} assigned code points differ`);
  for (const [c, what] of differences) {
    console.log(`U+${c.toString(16).toUpperCase().padStart(4, '0')}: ${what}`);
  }
}
