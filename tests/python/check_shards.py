#!/usr/bin/python3
"""Independent checks of unmask's HDF5 pretraining shards with h5py (tests/test_data.cc runs it).

  check_shards.py check SHARD [--seq S] [--pred P]
      Opens a shard written by `unmask prepare-text` / data::write_shard and checks what DLE's
      reader (run_pretraining.py, pretraining_dataset) relies on: the six keys, their dtypes
      (int32 for ids and positions, int8 for masks, segments and labels, as DLE's h5py writer
      stores them), gzip compression, shapes [N, S] / [N, P] / [N], and the values' ranges.
      Prints one summary line; exits 1 naming the first problem.

  check_shards.py write OUT_DIR [--n N] [--seq S] [--pred P] [--seed K]
      Writes OUT_DIR/dle.hdf5 the way DLE's create_pretraining_data.py does
      (f.create_dataset(key, data=..., dtype='i4' / 'i1', compression='gzip')) with random but
      well-formed instances, plus OUT_DIR/<key>.npy (int32) holding the same values, so the C++
      reader's result can be compared value by value.
"""
import argparse
import os
import sys

import h5py
import numpy as np

KEYS = {  # key: (numpy dtype DLE writes, rank)
    "input_ids": (np.int32, 2),
    "input_mask": (np.int8, 2),
    "segment_ids": (np.int8, 2),
    "masked_lm_positions": (np.int32, 2),
    "masked_lm_ids": (np.int32, 2),
    "next_sentence_labels": (np.int8, 1),
}


def fail(msg):
    print("check_shards: FAIL: " + msg)
    sys.exit(1)


def check(path, seq, pred):
    with h5py.File(path, "r") as f:
        missing = [k for k in KEYS if k not in f]
        if missing:
            fail(f"{path}: missing keys {missing} (present: {list(f.keys())})")
        n = f["input_ids"].shape[0]
        for key, (dtype, rank) in KEYS.items():
            d = f[key]
            if d.dtype != np.dtype(dtype):
                fail(f"{key}: dtype {d.dtype}, expected {np.dtype(dtype)}")
            if d.compression != "gzip":
                fail(f"{key}: compression {d.compression}, expected gzip")
            if d.chunks is None:
                fail(f"{key}: not chunked")
            if len(d.shape) != rank or d.shape[0] != n:
                fail(f"{key}: shape {d.shape}, expected rank {rank} with {n} rows")
        S = f["input_ids"].shape[1]
        P = f["masked_lm_positions"].shape[1]
        if seq is not None and S != seq:
            fail(f"sequence length {S}, expected {seq}")
        if pred is not None and P != pred:
            fail(f"max predictions {P}, expected {pred}")
        for key, width in (("input_mask", S), ("segment_ids", S), ("masked_lm_ids", P)):
            if f[key].shape[1] != width:
                fail(f"{key}: width {f[key].shape[1]}, expected {width}")
        ids = f["input_ids"][()].astype(np.int64)
        mask = f["input_mask"][()].astype(np.int64)
        seg = f["segment_ids"][()].astype(np.int64)
        pos = f["masked_lm_positions"][()].astype(np.int64)
        lab = f["masked_lm_ids"][()].astype(np.int64)
        nsp = f["next_sentence_labels"][()].astype(np.int64)
    lengths = mask.sum(axis=1)
    if not np.array_equal(mask, (np.arange(S)[None, :] < lengths[:, None]).astype(np.int64)):
        fail("input_mask is not 1...1 0...0 in every row")
    if np.any(ids[mask == 0] != 0) or np.any(seg[mask == 0] != 0):
        fail("padding holds non-zero ids or segments")
    if np.any(ids[:, 0] != 101):
        fail("a row does not start with [CLS] (101)")
    if not set(np.unique(nsp)) <= {0, 1} or not set(np.unique(seg)) <= {0, 1}:
        fail("labels or segments outside {0, 1}")
    # DLE's reader: the real predictions are the entries before the first position 0.
    zero = pos == 0
    k = np.where(zero.any(axis=1), zero.argmax(axis=1), P)
    real = np.arange(P)[None, :] < k[:, None]
    if np.any(pos[~real] != 0) or np.any(lab[~real] != 0):
        fail("masked_lm_positions / masked_lm_ids are not padded with 0 after the real predictions")
    if np.any(pos[real] >= np.broadcast_to(lengths[:, None], pos.shape)[real]):
        fail("a masked position lies in the padding")
    if np.any((pos[:, 1:] <= pos[:, :-1]) & real[:, 1:]):
        fail("masked_lm_positions are not ascending")
    if np.any(np.isin(lab[real], [101, 102])):
        fail("a [CLS] or [SEP] was masked")
    original = ids.copy()  # a random replacement may be any id, 102 included
    rows, cols = np.nonzero(real)
    original[rows, pos[rows, cols]] = lab[rows, cols]
    if np.any((original == 102).sum(axis=1) != 2):
        fail("a row does not hold exactly two [SEP] (102) once its masked tokens are restored")
    print(f"check_shards: OK {path}: {len(ids)} instances, seq {S}, pred {P}, gzip, int32/int8, "
          f"mean length {lengths.mean():.1f}, nsp random {nsp.mean():.3f}")


def write(out_dir, n, seq, pred, seed):
    rng = np.random.RandomState(seed)
    ids = np.zeros((n, seq), np.int32)
    mask = np.zeros((n, seq), np.int8)
    seg = np.zeros((n, seq), np.int8)
    pos = np.zeros((n, pred), np.int32)
    lab = np.zeros((n, pred), np.int32)
    nsp = rng.randint(0, 2, size=n).astype(np.int8)
    for r in range(n):
        length = rng.randint(5, seq + 1)
        a = rng.randint(1, length - 3)
        ids[r, :length] = rng.randint(999, 30522, size=length)
        ids[r, 0], ids[r, a + 1], ids[r, length - 1] = 101, 102, 102
        mask[r, :length] = 1
        seg[r, a + 2:length] = 1
        cands = [i for i in range(length) if ids[r, i] not in (101, 102)]
        k = min(pred, max(1, int(round(length * 0.15))))
        chosen = np.sort(rng.choice(cands, size=k, replace=False))
        pos[r, :k] = chosen
        lab[r, :k] = ids[r, chosen]
        ids[r, chosen] = 103
    os.makedirs(out_dir, exist_ok=True)
    arrays = {"input_ids": ids, "input_mask": mask, "segment_ids": seg, "masked_lm_positions": pos,
              "masked_lm_ids": lab, "next_sentence_labels": nsp}
    with h5py.File(os.path.join(out_dir, "dle.hdf5"), "w") as f:  # as DLE's write_instance_to_example_file
        for key, (dtype, _) in KEYS.items():
            f.create_dataset(key, data=arrays[key], dtype="i4" if dtype == np.int32 else "i1", compression="gzip")
    for key, a in arrays.items():
        np.save(os.path.join(out_dir, key + ".npy"), a.astype(np.int32))
    print(f"check_shards: wrote {out_dir}/dle.hdf5 ({n} instances)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["check", "write"])
    ap.add_argument("path")
    ap.add_argument("--seq", type=int)
    ap.add_argument("--pred", type=int)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    if a.mode == "check":
        check(a.path, a.seq, a.pred)
    else:
        write(a.path, a.n, a.seq or 64, a.pred or 10, a.seed)


if __name__ == "__main__":
    main()
