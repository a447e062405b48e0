"""Write one random BERT checkpoint (tests/python/make_bert_checkpoint.py, HF safetensors) again in
every layout its users have, with PyTorch's own torch.save, for tests/cli/test_checkpoint_layouts.sh:

  OUT/hf            the reference: config.json + model.safetensors + vocab.txt
  OUT/bin_zip       pytorch_model.bin (torch.save zip format)
  OUT/bin_legacy    pytorch_model.bin (legacy format: _use_new_zipfile_serialization=False)
  OUT/bin_sharded   pytorch_model-0000{1,2}-of-00002.bin + pytorch_model.bin.index.json
  OUT/dle           NVIDIA DLE: bert_config.json (hidden_act "gelu", DLE's erf GELU as HF's),
                    ckpt_10.pt and ckpt_20.pt ({"model": state_dict, "optimizer": ..., "epoch": ...}
                    with DLE's dense_act names and DDP's "module." prefixes); ckpt_20.pt is the model
  OUT/tok_json      config.json + model.safetensors + tokenizer.json (no vocab.txt), uncased
  OUT/tok_json_cased the same with a cased BertNormalizer
  OUT/run           a training run directory: checkpoints/step-000003/ (a copy of hf)
"""
import json
import os
import shutil
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bert_checkpoint  # noqa: E402
from st_io import read_safetensors  # noqa: E402


def state_dict(model_dir):
    tensors, _ = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    return {k: torch.from_numpy(v.data.reshape(v.shape).copy()) for k, v in tensors.items()}


def copy_config(src, dst, name="config.json", **changes):
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg.update(changes)
    with open(os.path.join(dst, name), "w") as f:
        json.dump(cfg, f, indent=2)


def tokenizer_json(vocab_path, lowercase):
    with open(vocab_path, encoding="utf-8") as f:
        tokens = [line.rstrip("\n") for line in f]
    return {
        "version": "1.0",
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": lowercase},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": {t: i for i, t in enumerate(tokens)}},
    }


def main():
    out = sys.argv[1]
    hf = os.path.join(out, "hf")
    make_bert_checkpoint.main(["--out", hf, "--size", "tiny", "--heads", "pretraining", "--seed", "5"])
    sd = state_dict(hf)
    vocab = os.path.join(hf, "vocab.txt")

    def plain_dir(name):
        d = os.path.join(out, name)
        os.makedirs(d)
        copy_config(hf, d)
        shutil.copy(vocab, d)
        return d

    torch.save(sd, os.path.join(plain_dir("bin_zip"), "pytorch_model.bin"))
    torch.save(sd, os.path.join(plain_dir("bin_legacy"), "pytorch_model.bin"), _use_new_zipfile_serialization=False)
    d = plain_dir("bin_sharded")
    names = sorted(sd)
    half = len(names) // 2
    weight_map = {}
    for k, part in enumerate([names[:half], names[half:]]):
        shard = f"pytorch_model-0000{k + 1}-of-00002.bin"
        torch.save({n: sd[n] for n in part}, os.path.join(d, shard))
        weight_map.update({n: shard for n in part})
    with open(os.path.join(d, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)

    d = os.path.join(out, "dle")
    os.makedirs(d)
    copy_config(hf, d, "bert_config.json", hidden_act="gelu")
    shutil.copy(vocab, d)
    dle = {"module." + k.replace(".dense.", ".dense_act.") if (".intermediate.dense." in k or "pooler.dense." in k
           or "transform.dense." in k) else "module." + k: v for k, v in sd.items()}
    older = {k: torch.zeros_like(v) for k, v in dle.items()}  # ckpt_10: not the newest, must not be read
    torch.save({"model": older, "epoch": 0}, os.path.join(d, "ckpt_10.pt"))
    torch.save({"model": dle, "optimizer": {"state": {}, "param_groups": []}, "epoch": 1}, os.path.join(d, "ckpt_20.pt"))

    for name, lowercase in (("tok_json", True), ("tok_json_cased", False)):
        d = os.path.join(out, name)
        os.makedirs(d)
        copy_config(hf, d)
        shutil.copy(os.path.join(hf, "model.safetensors"), d)
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(tokenizer_json(vocab, lowercase), f)

    shutil.copytree(hf, os.path.join(out, "run", "checkpoints", "step-000003"))
    print(f"wrote the layouts under {out}")


if __name__ == "__main__":
    main()
