"""Minimal safetensors reader/writer (struct + json + numpy), written for unmask's tests.

Format (see /work/shared/reference/bert.md section 4.4):
  [u64 little-endian N][N bytes of UTF-8 JSON header][raw tensor bytes]
The header maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}, offsets
relative to the first byte after the header, plus an optional "__metadata__" str->str map.
Tensors are little-endian, C order, contiguous.  We pad the header with spaces so that the
data section starts on an 8-byte boundary, and lay tensors out by decreasing element size
(then by name) so that every tensor is naturally aligned, as the reference implementation does.

No dependency on the `safetensors` package (not installed here) nor on torch.
"""
from __future__ import annotations

import json
import struct

import numpy as np

# dtype name -> (numpy storage dtype, element size).  BF16 is stored as raw uint16.
_ST_DTYPES = {
    "F64": (np.dtype("<f8"), 8),
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("?"), 1),
}


class RawTensor:
    """A tensor as stored: safetensors dtype name, shape, and the storage array.

    For BF16 `data` holds the raw uint16 bit patterns; use `.to_float32()` to decode.
    """

    def __init__(self, dtype: str, shape, data: np.ndarray):
        if dtype not in _ST_DTYPES:
            raise ValueError(f"unsupported safetensors dtype {dtype}")
        self.dtype = dtype
        self.shape = tuple(int(s) for s in shape)
        self.data = np.ascontiguousarray(data).reshape(self.shape)

    def to_float32(self) -> np.ndarray:
        if self.dtype == "BF16":
            return (self.data.astype(np.uint32) << 16).view(np.float32)
        return self.data.astype(np.float32)

    def to_float64(self) -> np.ndarray:
        # f16/bf16/f32 -> f64 is exact.
        return self.to_float32().astype(np.float64) if self.dtype != "F64" else self.data.copy()

    def to_numpy(self) -> np.ndarray:
        """Float tensors decoded to float32 (F64 kept), integer tensors as stored."""
        if self.dtype in ("F32", "F16", "BF16"):
            return self.to_float32()
        return self.data.copy()


def bf16_bits_from_float32(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16), like torch's .bfloat16()."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    nan = np.isnan(x)
    rounding_bias = ((u >> 16) & 1) + 0x7FFF
    out = ((u + rounding_bias) >> 16).astype(np.uint16)
    out[nan] = 0x7FC0
    return out


def write_safetensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Write `tensors` (name -> RawTensor) to `path`."""
    if metadata is None:
        metadata = {"format": "pt"}
    names = sorted(tensors, key=lambda n: (-_ST_DTYPES[tensors[n].dtype][1], n))
    header = {}
    offset = 0
    blobs = []
    for name in names:
        t = tensors[name]
        storage, _ = _ST_DTYPES[t.dtype]
        blob = np.ascontiguousarray(t.data, dtype=storage).tobytes()
        header[name] = {"dtype": t.dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hbytes += b" " * ((-(8 + len(hbytes))) % 8)  # data section starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path: str):
    """Read a .safetensors file -> (dict name -> RawTensor, metadata dict)."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError(f"{path}: header length {n} exceeds file size {len(buf)}")
    header = json.loads(buf[8:8 + n].decode("utf-8"))
    base = 8 + n
    data_len = len(buf) - base
    metadata = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        dtype = info["dtype"]
        if dtype not in _ST_DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        storage, size = _ST_DTYPES[dtype]
        shape = [int(s) for s in info["shape"]]
        begin, end = (int(v) for v in info["data_offsets"])
        count = int(np.prod(shape)) if shape else 1
        if not (0 <= begin <= end <= data_len) or end - begin != count * size:
            raise ValueError(f"{path}: tensor {name}: bad data_offsets {begin},{end} for shape {shape} {dtype}")
        arr = np.frombuffer(buf, dtype=storage, count=count, offset=base + begin)
        out[name] = RawTensor(dtype, shape, arr.copy())
    return out, metadata


def read_model_dir(model_dir: str):
    """Read model.safetensors, or a sharded checkpoint via model.safetensors.index.json."""
    import os
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)[0]
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        out = {}
        for shard in sorted(set(weight_map.values())):
            out.update(read_safetensors(os.path.join(model_dir, shard))[0])
        return out
    raise FileNotFoundError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")
