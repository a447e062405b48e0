#!/usr/bin/env bash
# Turns the reStructuredText sources of the Python documentation (Debian package python3.11-doc,
# /usr/share/doc/python3.11/html/_sources/**/*.rst.txt, about 12 MB) into a pretraining corpus
# in prepare-text's `documents` format: one line per source file, holding its prose.
#
#   bash scripts/corpus_python_docs.sh [OUT_FILE] [SRC_DIR]
#   unmask prepare-text --input OUT_FILE --format documents --vocab vocab.txt --output shards128
#
# Kept: paragraphs, list items, the prose bodies of directives (function / class / note /
# versionadded ... descriptions, which hold most of the library reference). Dropped: section
# titles and their adornments, comments and link targets, literal blocks (after "::"), code,
# doctest (>>>), table, toctree, index, image and similar directive bodies, field lists, grid and
# simple tables. Inline markup keeps its text: :func:`~os.path.join` -> join, ``x`` -> x,
# `text <url>`_ -> text, *x* / **x** -> x, a trailing "::" -> ":". Whitespace is collapsed.
# The output is deterministic (files in sorted path order).
set -euo pipefail
OUT=${1:-python_docs.txt}
SRC=${2:-/usr/share/doc/python3.11/html/_sources}
if [[ ! -d "$SRC" ]]; then
  echo "corpus_python_docs: $SRC not found (hint: apt-get install python3.11-doc, or pass SRC_DIR)" >&2
  exit 1
fi
PY=$(command -v python3 || true)
[[ -n "$PY" ]] || { echo "corpus_python_docs: python3 is required" >&2; exit 1; }

"$PY" - "$SRC" "$OUT" <<'EOF'
import os
import re
import sys

src, out = sys.argv[1], sys.argv[2]

# Directives whose indented body is not prose.
SKIP_BODY = {"code-block", "sourcecode", "code", "doctest", "testcode", "testoutput", "testsetup",
             "testcleanup", "productionlist", "literalinclude", "csv-table", "list-table", "table",
             "toctree", "raw", "index", "image", "figure", "highlight", "include", "only", "tabularcolumns",
             "c:macro", "opcode", "cmdoption", "option", "envvar", "audit-event-table", "availability",
             "pdb-command", "2to3fixer", "impl-detail", "seealso", "moduleauthor", "sectionauthor"}
ADORNMENT = re.compile(r'^([=\-~^"\'*#+`:.<>_])\1{2,}\s*$')
FIELD = re.compile(r'^:[^:`]+:(\s|$)')
BULLET = re.compile(r'^(\*|-|\+|#\.|\d+\.|\(?[a-z0-9]\))\s+')
ROLE = re.compile(r':[\w:.+-]+:`([^`]*)`')
LINK = re.compile(r'`([^`<]*?)\s*(<[^`>]*>)?`__?')


def role_text(m):
    t = m.group(1)
    lt = t.find(" <")
    if lt > 0 and t.endswith(">"):
        t = t[:lt]
    if t.startswith("!"):
        t = t[1:]
    if t.startswith("~"):
        t = t[1:].split(".")[-1]
    return t


def inline(text):
    text = ROLE.sub(role_text, text)
    text = re.sub(r'``([^`]*)``', r'\1', text)
    text = LINK.sub(lambda m: m.group(1), text)
    text = re.sub(r'`([^`]*)`', r'\1', text)
    text = re.sub(r'\*\*([^*]+)\*\*', r'\1', text)
    text = re.sub(r'(?<![\w*])\*([^*\s][^*]*)\*', r'\1', text)
    text = re.sub(r'\|([\w-]+)\|', r'\1', text)
    text = text.replace("\\ ", "").replace("\\", "")
    text = re.sub(r'\s*::$', ':', text.rstrip())
    return re.sub(r'\s+', ' ', text).strip()


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def prose(lines):
    paragraphs = []
    skip_deeper_than = None  # skip lines indented more than this (a non-prose body)
    para, para_indent = [], 0

    def flush():
        nonlocal para
        if para:
            p = inline(" ".join(para))
            if len(p) > 1:
                paragraphs.append(p)
        para = []

    for raw in lines:
        line = raw.rstrip().replace("\t", "        ")
        if not line.strip():
            flush()
            continue
        ind = indent_of(line)
        text = line.strip()
        if skip_deeper_than is not None:
            if ind > skip_deeper_than:
                continue
            skip_deeper_than = None
        if text.startswith(".. "):
            flush()
            m = re.match(r'\.\. ([\w:-]+)::\s*(.*)', text)
            if not m or m.group(1) in SKIP_BODY:
                skip_deeper_than = ind  # comment, target or non-prose directive: drop its body
            continue
        if text.startswith(":") and FIELD.match(text):
            flush()
            skip_deeper_than = ind
            continue
        if ADORNMENT.match(text) or text.startswith(("+-", "+=", "|", ">>>", "...")) or re.match(r'^=+( +=+)+$', text):
            # a title's adornment also drops the title line gathered just before it
            para = []
            continue
        b = BULLET.match(text)
        if b:
            flush()
            text = text[b.end():]
        elif para and ind != para_indent and not (ind > para_indent and len(para) == 1 and BULLET.match(para[0] or "")):
            flush()
        if not para:
            para_indent = ind
        para.append(text)
        if text.endswith("::"):
            flush()
            skip_deeper_than = ind  # a literal block follows
    flush()
    return paragraphs


files = []
for root, _, names in os.walk(src):
    files += [os.path.join(root, n) for n in names if n.endswith(".rst.txt")]
files.sort()
docs = words = 0
with open(out + ".tmp", "w", encoding="utf-8") as f:
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as g:
            paragraphs = prose(g.read().splitlines())
        line = " ".join(paragraphs)
        if line:
            f.write(line + "\n")
            docs += 1
            words += len(line.split())
os.replace(out + ".tmp", out)
print(f"corpus_python_docs: {len(files)} files -> {out}: {docs} documents, {words} words, "
      f"{os.path.getsize(out) / 1e6:.1f} MB")
EOF
