#!/usr/bin/env python3
"""Generate src/data/text/unicode_tables.cc and unicode_decompositions.cc: the Unicode data the
WordPiece tokenizer needs (two files, so that each stays under the project's ~1000-line aim).

Reads the Unicode Character Database shipped by Debian's `unicode-data` package (no
network, no Python `unicodedata`, whose version depends on the interpreter) and writes
compact range tables:

  * property runs: general category, White_Space, Cased, Case_Ignorable and the canonical
    combining class, one entry per run of code points on which all of them are constant
    (about 4-5k runs instead of a 1.1M entry array);
  * lowercase runs: full lowercase mapping (UnicodeData simple mapping, overridden by the
    unconditional entries of SpecialCasing.txt, e.g. U+0130 -> U+0069 U+0307), stored as
    arithmetic runs "start, count, step, delta" plus a short list of multi-code-point
    mappings;
  * canonical decompositions, fully expanded (NFD needs the recursive closure); Hangul
    syllables are decomposed algorithmically in src/data/text/unicode.cc and are not listed.

Usage:
  python3 tools/gen_unicode_tables.py                          # writes both files in src/data/text/
  python3 tools/gen_unicode_tables.py --ucd DIR --out-dir DIR  # another UCD copy / output folder
  python3 tools/gen_unicode_tables.py --check                  # exit 1 if a committed file is stale

The generated files are committed so that building needs neither Python nor unicode-data.
"""
import argparse
import os
import re
import sys

GENERAL_CATEGORIES = [  # order must match unmask::text::unicode::Category in unicode.h
    "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No",
    "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So",
    "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co", "Cn",
]
FLAG_WHITE_SPACE = 1
FLAG_CASED = 2
FLAG_CASE_IGNORABLE = 4
MAX_CODE_POINT = 0x10FFFF
HANGUL_FIRST, HANGUL_LAST = 0xAC00, 0xD7A3


def read_lines(path):
    """Yields the data fields of a UCD text file (comments and blank lines dropped)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                yield [field.strip() for field in line.split(";")]


def parse_range(text):
    if ".." in text:
        first, last = text.split("..")
        return int(first, 16), int(last, 16)
    return int(text, 16), int(text, 16)


def read_unicode_data(ucd):
    """Returns (category[cp], combining_class[cp], simple_lower{cp: cp}, decomposition{cp: [cp]})."""
    category = ["Cn"] * (MAX_CODE_POINT + 1)
    combining_class = [0] * (MAX_CODE_POINT + 1)
    simple_lower = {}
    decomposition = {}
    range_first = None
    for fields in read_lines(os.path.join(ucd, "UnicodeData.txt")):
        cp, name, gc, ccc, decomp, lower = (int(fields[0], 16), fields[1], fields[2],
                                            int(fields[3]), fields[5], fields[13])
        if name.endswith(", First>"):
            range_first = cp
            continue
        first = range_first if name.endswith(", Last>") else cp
        range_first = None
        for c in range(first, cp + 1):
            category[c] = gc
            combining_class[c] = ccc
        if lower:
            simple_lower[cp] = int(lower, 16)
        if decomp and not decomp.startswith("<"):  # "<tag> ..." marks a compatibility mapping
            decomposition[cp] = [int(x, 16) for x in decomp.split()]
    return category, combining_class, simple_lower, decomposition


def read_binary_property(path, wanted):
    """Returns the set of code points that have property `wanted` in a PropList-style file."""
    result = set()
    for fields in read_lines(path):
        if fields[1] == wanted:
            first, last = parse_range(fields[0])
            result.update(range(first, last + 1))
    return result


def read_full_lowercase(ucd, simple_lower):
    """Full lowercase mapping as Python's str.lower() applies it, per code point.

    SpecialCasing.txt's unconditional entries override UnicodeData; conditional ones
    (Final_Sigma, language-specific) are skipped. Hugging Face lowercases one code point
    at a time (transformers' slow tokenizer lowercases char by char, the Rust normalizer
    uses char::to_lowercase), so Final_Sigma never fires there: U+03A3 always maps to U+03C3.
    """
    lower = {cp: [target] for cp, target in simple_lower.items()}
    for fields in read_lines(os.path.join(ucd, "SpecialCasing.txt")):
        fields = [f for f in fields if f != ""]
        if len(fields) > 4:  # a condition list is present
            continue
        cp = int(fields[0], 16)
        mapping = [int(x, 16) for x in fields[1].split()]
        if mapping == [cp]:
            lower.pop(cp, None)
        else:
            lower[cp] = mapping
    return lower


def full_decomposition(cp, decomposition):
    if cp not in decomposition:
        return [cp]
    out = []
    for part in decomposition[cp]:
        out.extend(full_decomposition(part, decomposition))
    return out


def unicode_version(ucd):
    with open(os.path.join(ucd, "ReadMe.txt"), encoding="utf-8") as f:
        text = f.read()
    match = re.search(r"Version (\d+\.\d+\.\d+)", text)
    if match:
        return match.group(1)
    with open(os.path.join(ucd, "DerivedAge.txt"), encoding="utf-8") as f:
        match = re.search(r"DerivedAge-(\d+\.\d+\.\d+)\.txt", f.readline())
    return match.group(1) if match else "unknown"


def build_property_runs(category, combining_class, white_space, cased, case_ignorable):
    runs = []  # (start, category index, flags, ccc)
    previous = None
    for cp in range(MAX_CODE_POINT + 1):
        flags = ((FLAG_WHITE_SPACE if cp in white_space else 0) |
                 (FLAG_CASED if cp in cased else 0) |
                 (FLAG_CASE_IGNORABLE if cp in case_ignorable else 0))
        key = (GENERAL_CATEGORIES.index(category[cp]), flags, combining_class[cp])
        if key != previous:
            runs.append((cp,) + key)
            previous = key
    return runs


def build_lowercase_runs(lower):
    """Groups single-code-point mappings into runs (start, count, step, delta)."""
    singles = sorted((cp, m[0]) for cp, m in lower.items() if len(m) == 1 and m[0] != cp)
    runs = []
    i = 0
    while i < len(singles):
        start, target = singles[i]
        delta = target - start
        best_step, best_count = 1, 1
        for step in (1, 2):
            count = 1
            while (i + count < len(singles) and
                   singles[i + count][0] == start + count * step and
                   singles[i + count][1] - singles[i + count][0] == delta):
                count += 1
            if count > best_count:
                best_step, best_count = step, count
        runs.append((start, best_count, best_step, delta))
        i += best_count
    multi = sorted((cp, m) for cp, m in lower.items() if len(m) > 1)
    return runs, multi


def emit(ucd):
    version = unicode_version(ucd)
    category, combining_class, simple_lower, decomposition = read_unicode_data(ucd)
    white_space = read_binary_property(os.path.join(ucd, "PropList.txt"), "White_Space")
    derived = os.path.join(ucd, "DerivedCoreProperties.txt")
    cased = read_binary_property(derived, "Cased")
    case_ignorable = read_binary_property(derived, "Case_Ignorable")

    property_runs = build_property_runs(category, combining_class, white_space, cased,
                                        case_ignorable)
    lower_runs, lower_multi = build_lowercase_runs(read_full_lowercase(ucd, simple_lower))
    decompositions = []  # (cp, offset, length)
    pool = []
    for cp in sorted(decomposition):
        expanded = full_decomposition(cp, decomposition)
        decompositions.append((cp, len(pool), len(expanded)))
        pool.extend(expanded)
    max_decomposition = max(length for _, _, length in decompositions)
    max_lower = max(len(m) for _, m in lower_multi)

    def file_start(what):
        out = []
        out.append("// GENERATED by tools/gen_unicode_tables.py from Debian's unicode-data package")
        out.append(f"// (Unicode {version}, /usr/share/unicode). Do not edit; rerun the script instead.")
        out.append("//")
        out.append(f"// {what}")
        out.append("// Layout and meaning of each table: src/data/text/unicode_tables.h.")
        out.append('#include "data/text/unicode_tables.h"')
        out.append("")
        out.append("namespace unmask::text::unicode::tables {")
        out.append("")
        return out

    lines = file_start("Properties and lowercase mappings (decompositions: unicode_decompositions.cc).")
    w = lines.append
    w(f'const char kUnicodeVersion[] = "{version}";')
    w("")
    w(f"// {len(property_runs)} runs: start, category, flags (1 White_Space, 2 Cased,")
    w("// 4 Case_Ignorable), canonical combining class.")
    w(f"const PropertyRun kPropertyRuns[{len(property_runs)}] = {{")
    row = []
    for start, gc, flags, ccc in property_runs:
        row.append(f"{{0x{start:X},{gc},{flags},{ccc}}},")
        if len(row) == 6:
            w("".join(row))
            row = []
    if row:
        w("".join(row))
    w("};")
    w(f"const size_t kPropertyRunCount = {len(property_runs)};")
    w("")
    w(f"// {len(lower_runs)} runs: start, count, step, delta (lower = cp + delta).")
    w(f"const LowercaseRun kLowercaseRuns[{len(lower_runs)}] = {{")
    row = []
    for start, count, step, delta in lower_runs:
        row.append(f"{{0x{start:X},{count},{step},{delta}}},")
        if len(row) == 6:
            w("".join(row))
            row = []
    if row:
        w("".join(row))
    w("};")
    w(f"const size_t kLowercaseRunCount = {len(lower_runs)};")
    w("")
    w("// Lowercase mappings longer than one code point (SpecialCasing.txt, unconditional).")
    w(f"const LowercaseMulti kLowercaseMulti[{len(lower_multi)}] = {{")
    for cp, mapping in lower_multi:
        padded = mapping + [0] * (3 - len(mapping))
        w(f"  {{0x{cp:X}, {len(mapping)}, {{{', '.join(f'0x{x:X}' for x in padded)}}}}},")
    w("};")
    w(f"const size_t kLowercaseMultiCount = {len(lower_multi)};")
    w("")
    w("}  // namespace unmask::text::unicode::tables")
    tables = "\n".join(lines) + "\n"

    lines = file_start("Canonical decompositions (properties and lowercase: unicode_tables.cc).")
    w = lines.append
    w(f"// {len(decompositions)} canonical decompositions, fully expanded: code point, offset into")
    w(f"// kDecompositionPool, length (at most {max_decomposition}).")
    w(f"const Decomposition kDecompositions[{len(decompositions)}] = {{")
    row = []
    for cp, offset, length in decompositions:
        row.append(f"{{0x{cp:X},{offset},{length}}},")
        if len(row) == 6:
            w("".join(row))
            row = []
    if row:
        w("".join(row))
    w("};")
    w(f"const size_t kDecompositionCount = {len(decompositions)};")
    w(f"const char32_t kDecompositionPool[{len(pool)}] = {{")
    for i in range(0, len(pool), 10):
        w(",".join(f"0x{x:X}" for x in pool[i:i + 10]) + ",")
    w("};")
    w("")
    w("}  // namespace unmask::text::unicode::tables")
    decompositions_text = "\n".join(lines) + "\n"
    assert max_decomposition <= 4 and max_lower <= 3, "grow the buffers in unicode_tables.h"
    return {"unicode_tables.cc": tables, "unicode_decompositions.cc": decompositions_text}


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ucd", default="/usr/share/unicode",
                        help="directory holding UnicodeData.txt etc. (apt-get install unicode-data)")
    parser.add_argument("--out-dir", default=os.path.join(root, "src/data/text"),
                        help="where unicode_tables.cc and unicode_decompositions.cc go")
    parser.add_argument("--check", action="store_true",
                        help="compare with the files in --out-dir instead of writing them; exit 1 if different")
    args = parser.parse_args()
    if not os.path.exists(os.path.join(args.ucd, "UnicodeData.txt")):
        sys.exit(f"gen_unicode_tables: {args.ucd}/UnicodeData.txt not found "
                 "(hint: apt-get install unicode-data, or pass --ucd DIR)")
    files = emit(args.ucd)
    if args.check:
        # The committed tables come from one UCD version (Debian 12: 15.0.0). Another distribution's
        # unicode-data is not a stale file: say so and pass, rather than fail the build's checks.
        committed = re.search(r'kUnicodeVersion\[\] = "([^"]+)"',
                              open(os.path.join(args.out_dir, "unicode_tables.cc"), encoding="utf-8").read())
        installed = re.search(r'kUnicodeVersion\[\] = "([^"]+)"', files["unicode_tables.cc"])
        if committed and installed and committed.group(1) != installed.group(1):
            print(f"gen_unicode_tables: skipped: the installed UCD is Unicode {installed.group(1)}, "
                  f"the committed tables are {committed.group(1)}")
            return
    for name, text in files.items():
        path = os.path.join(args.out_dir, name)
        if args.check:
            with open(path, encoding="utf-8") as f:
                if f.read() != text:
                    sys.exit(f"gen_unicode_tables: {path} is stale "
                             "(hint: rerun python3 tools/gen_unicode_tables.py and commit)")
            print(f"{path} is up to date")
            continue
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)  # atomic: a reader never sees half a table
        print(f"wrote {path} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
