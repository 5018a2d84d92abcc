# SPDX-License-Identifier: MIT OR Apache-2.0
"""A small safetensors reader and writer on numpy (Debian 12 has no python3-safetensors).

The format: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor name to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data that follows the header)
plus an optional "__metadata__" object of strings, then the raw little-endian bytes.

A tensor is a `Tensor(dtype, data)`: `dtype` is the safetensors name and `data` a numpy array of
the storage type below. BF16 and F8_E4M3 have no numpy type: they travel as their bit patterns
(uint16 / uint8); numerics.py converts them.
"""
import json
import os
import struct
from typing import Dict, NamedTuple, Optional

import numpy as np

STORAGE = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.uint16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "U16": np.uint16, "U32": np.uint32, "U64": np.uint64,
    "F8_E4M3": np.uint8, "BOOL": np.bool_,
}


class Tensor(NamedTuple):
    dtype: str
    data: np.ndarray


def tensor(dtype: str, data) -> Tensor:
    """A Tensor whose data is converted (not reinterpreted) to the storage type of `dtype`."""
    return Tensor(dtype, np.ascontiguousarray(np.asarray(data).astype(STORAGE[dtype], copy=False)))


def save(path: str, tensors: Dict[str, Tensor], metadata: Optional[Dict[str, str]] = None) -> None:
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        t = tensors[name]
        data = np.ascontiguousarray(t.data.astype(STORAGE[t.dtype], copy=False))
        blob = data.astype(data.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": t.dtype, "shape": list(data.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".partial"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def load(path: str) -> Dict[str, Tensor]:
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    n = struct.unpack("<Q", raw[:8])[0]
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        dtype = info["dtype"]
        if dtype not in STORAGE:
            raise ValueError(f"{path}: tensor '{name}': dtype {dtype} is not supported here")
        begin, end = info["data_offsets"]
        storage = np.dtype(STORAGE[dtype]).newbyteorder("<")
        shape = tuple(info["shape"])
        if end - begin != int(np.prod(shape, dtype=np.int64)) * storage.itemsize or base + end > len(raw):
            raise ValueError(f"{path}: tensor '{name}': offsets [{begin}, {end}] do not fit {dtype} {list(shape)}")
        data = np.frombuffer(raw, dtype=storage, count=(end - begin) // storage.itemsize, offset=base + begin)
        out[name] = Tensor(dtype, data.reshape(shape).astype(storage.newbyteorder("="), copy=True))
    return out


def metadata(path: str) -> Dict[str, str]:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)).get("__metadata__", {})


def save_sharded(directory: str, tensors: Dict[str, Tensor], shards: int, metadata: Optional[Dict[str, str]] = None,
                 stem: str = "model") -> None:
    """Splits `tensors` (in name order) over `shards` files named as Hugging Face names them
    (model-00001-of-00002.safetensors) and writes model.safetensors.index.json beside them."""
    names = sorted(tensors)
    per = -(-len(names) // shards)
    weight_map = {}
    total = 0
    for i in range(shards):
        part = {n: tensors[n] for n in names[i * per:(i + 1) * per]}
        file = f"{stem}-{i + 1:05d}-of-{shards:05d}.safetensors"
        save(os.path.join(directory, file), part, metadata)
        for n, t in part.items():
            weight_map[n] = file
            total += t.data.nbytes
    with open(os.path.join(directory, f"{stem}.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def load_checkpoint(directory: str) -> Dict[str, Tensor]:
    """Every tensor of a checkpoint directory: the files its *.safetensors.index.json names, else
    every *.safetensors file in it."""
    files = sorted(os.listdir(directory))
    index = [f for f in files if f.endswith(".safetensors.index.json")]
    if index:
        with open(os.path.join(directory, index[0])) as f:
            shard_files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        shard_files = [f for f in files if f.endswith(".safetensors")]
    out = {}
    for file in shard_files:
        for name, t in load(os.path.join(directory, file)).items():
            if name in out:
                raise ValueError(f"{directory}: tensor '{name}' is in more than one file")
            out[name] = t
    return out
