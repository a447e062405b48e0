#!/usr/bin/python3
"""Writes the small fine-tuning fixtures of tests/cli/test_finetune_cli.sh (deterministic).

  /usr/bin/python3 tests/data/finetune/make_fixtures.py   # rewrites the files beside this script

squad_{train,dev}.json: SQuAD v1.1 layout; each context names where an animal lives, the
question asks for it. classify_{train,dev}.tsv: MRPC layout ("Quality", "#1 String", "#2 String").
sst_{train,dev}.tsv: SST-2 layout. tokens_{train,dev}.txt: CoNLL-2003 layout (4 columns, BIO).
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(7)
ANIMALS = ["cat", "dog", "horse", "bird", "fish", "sheep"]
PLACES = ["Paris", "London", "Berlin", "Madrid", "Rome", "Vienna", "Oslo", "Dublin"]
FILLER = ["the", "weather", "was", "mild", "and", "people", "walked", "slowly", "along", "river", "in", "spring"]


def squad(n_paragraphs, seed_offset):
    data = []
    for p in range(n_paragraphs):
        animal, place = rng.choice(ANIMALS), rng.choice(PLACES)
        pre = " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 12)))
        post = " ".join(rng.choice(FILLER) for _ in range(rng.randint(3, 12)))
        context = f"{pre.capitalize()}. The {animal} lives in {place}, near the old bridge. {post}."
        start = context.index(f"in {place}") + 3
        qa = {"id": f"q{seed_offset + p}", "question": f"Where does the {animal} live?",
              "answers": [{"text": place, "answer_start": start}]}
        if seed_offset:  # dev: a second ground truth, as the real dev set has
            qa["answers"].append({"text": f"{place},", "answer_start": start})
        data.append({"title": f"t{p}", "paragraphs": [{"context": context, "qas": [qa]}]})
    return {"version": "1.1", "data": data}


GOOD = ["good", "great", "fine", "lovely", "excellent"]
BAD = ["bad", "awful", "poor", "terrible", "boring"]


def sentence(words):
    return " ".join(words)


def sst(n):
    rows = ["sentence\tlabel"]
    for _ in range(n):
        y = rng.randint(0, 1)
        w = rng.choice(GOOD if y else BAD)
        rows.append(f"a {w} movie with {rng.choice(FILLER)} scenes\t{y}")
    return "\n".join(rows) + "\n"


def mrpc(n):
    rows = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(n):
        y = rng.randint(0, 1)
        a = f"The {rng.choice(ANIMALS)} said \"{rng.choice(GOOD)}\" in {rng.choice(PLACES)}."
        b = a if y else f"A {rng.choice(ANIMALS)} walked to {rng.choice(PLACES)}."
        rows.append(f"{y}\t{2 * i}\t{2 * i + 1}\t{a}\t{b}")
    return "\n".join(rows) + "\n"


def conll(n):
    lines = ["-DOCSTART- -X- -X- O", ""]
    for _ in range(n):
        words = []
        for _ in range(rng.randint(3, 8)):
            r = rng.random()
            if r < 0.2:
                words += [("John", "B-PER"), ("Smith", "I-PER")]
            elif r < 0.4:
                words.append((rng.choice(PLACES), "B-LOC"))
            else:
                words.append((rng.choice(FILLER), "O"))
        lines += [f"{w} NN B-NP {t}" for w, t in words] + [""]
    return "\n".join(lines)


def write(name, text):
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        f.write(text)


write("squad_train.json", json.dumps(squad(24, 0), indent=1) + "\n")
write("squad_dev.json", json.dumps(squad(8, 1000), indent=1) + "\n")
write("sst_train.tsv", sst(32))
write("sst_dev.tsv", sst(12))
write("mrpc_train.tsv", mrpc(24))
write("mrpc_dev.tsv", mrpc(8))
write("tokens_train.txt", conll(24))
write("tokens_dev.txt", conll(8))
