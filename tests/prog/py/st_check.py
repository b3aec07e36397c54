"""st_check.py - safetensors files by hand (struct, json, numpy; not the
safetensors package), to check lib/ckpt/safetensors.c independently.

  st_check.py read FILE
      Validate FILE as the reference implementation does (header length in
      the file, a JSON object without duplicate keys, known dtypes, sizes that
      match the shapes, tensors covering the data buffer exactly) and print,
      tab-separated:
        header_len  N
        keys        every header key, in header order
        meta        KEY  VALUE                  (one line each, header order)
        tensor      NAME  DTYPE  [d0,d1]  CRC   (in data order; CRC is
                    zlib.crc32 of the tensor's bytes, through numpy)
      Exit 1 with a message on stderr when the file is invalid.

  st_check.py write FILE [--pad N] [--meta K=V]... NAME:DTYPE:SHAPE...
      Write FILE with the given tensors, data in the order given, header keys
      in the reverse order and "__metadata__" last, header padded with spaces
      to a multiple of N (default 8). SHAPE is "2x3", "" for a scalar, "0"
      for an empty tensor. Element i (C order) of each tensor:
        F32  float32(((i * 7919) % 2001 - 1000) / 8)
        BF16 the top 16 bits of that float32
        F16  float16 of the same value (exact: 11 significant bits)
        I64  int64 bits of (i * 0x9E3779B97F4A7C15) mod 2**64

  st_check.py index FILE
      FILE (a model.safetensors.index.json) is byte for byte what
      transformers writes for its content: json.dumps(indent=2,
      sort_keys=True) and a newline. Prints "same".
"""
import json
import struct
import sys
import zlib

import numpy as np

SIZES = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "F64": 8, "I32": 4, "I16": 2, "I8": 1,
         "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E5M2": 1, "F8_E4M3": 1}
NP = {"F32": "<f4", "BF16": "<u2", "F16": "<f2", "I64": "<i8"}


def fail(msg):
    sys.stderr.write("st_check: %s\n" % msg)
    sys.exit(1)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        fail("duplicate key in %r" % keys)
    return pairs  # a list keeps the order


def read(path):
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        fail("%s: %d bytes" % (path, len(buf)))
    (n,) = struct.unpack("<Q", buf[:8])
    if n > 100_000_000 or n > len(buf) - 8:
        fail("%s: header length %d, file %d bytes" % (path, n, len(buf)))
    text = buf[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        fail("%s: header does not start with {" % path)
    pairs = json.loads(text, object_pairs_hook=no_duplicates)
    if not isinstance(pairs, list):
        fail("%s: header is not an object" % path)
    data = buf[8 + n:]
    print("header_len\t%d" % n)
    print("keys\t" + "\t".join(k for k, _ in pairs))
    tensors = []
    for k, v in pairs:
        v = dict(v)
        if k == "__metadata__":
            for mk, mv in v.items():
                if not isinstance(mv, str):
                    fail("%s: metadata %s is not a string" % (path, mk))
                print("meta\t%s\t%s" % (mk, mv))
            continue
        dt, shape, offs = v["dtype"], v["shape"], v["data_offsets"]
        if dt not in SIZES:
            fail("%s: %s: dtype %s" % (path, k, dt))
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
            fail("%s: %s: shape %r" % (path, k, shape))
        if len(offs) != 2 or not all(isinstance(o, int) and o >= 0 for o in offs) or offs[1] < offs[0]:
            fail("%s: %s: data_offsets %r" % (path, k, offs))
        numel = 1
        for d in shape:
            numel *= d
        if numel * SIZES[dt] != offs[1] - offs[0]:
            fail("%s: %s: %s %r in %r" % (path, k, dt, shape, offs))
        tensors.append((offs[0], offs[1], len(tensors), k, dt, shape))
    tensors.sort()
    pos = 0
    for b, e, _, k, dt, shape in tensors:
        if b != pos:
            fail("%s: %s begins at %d, previous end %d" % (path, k, b, pos))
        pos = e
    if pos != len(data):
        fail("%s: tensors end at %d, data buffer %d bytes" % (path, pos, len(data)))
    for b, e, _, k, dt, shape in tensors:
        if dt not in NP:
            fail("%s: %s: dtype %s has no numpy view here" % (path, k, dt))
        a = np.frombuffer(data[b:e], dtype=NP[dt]).reshape(shape)
        crc = zlib.crc32(a.tobytes())
        print("tensor\t%s\t%s\t[%s]\t%d" % (k, dt, ",".join(str(d) for d in a.shape), crc))


def values(dt, n):
    i = np.arange(n, dtype=np.int64)
    f = (((i * 7919) % 2001 - 1000) / 8).astype(np.float32)
    if dt == "F32":
        return f
    if dt == "BF16":
        return (f.view("<u4") >> 16).astype("<u2")
    if dt == "F16":
        h = f.astype("<f2")
        assert (h.astype(np.float32) == f).all()
        return h
    if dt == "I64":
        return (i.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view("<i8")
    fail("dtype %s" % dt)


def write(path, args):
    pad, meta, specs = 8, [], []
    while args:
        a = args.pop(0)
        if a == "--pad":
            pad = int(args.pop(0))
        elif a == "--meta":
            meta.append(args.pop(0).split("=", 1))
        else:
            specs.append(a)
    entries, blobs, off = [], [], 0
    for s in specs:
        name, dt, shape = s.rsplit(":", 2)
        shape = [int(d) for d in shape.split("x")] if shape else []
        n = int(np.prod(shape, dtype=np.int64))
        b = values(dt, n).astype(NP[dt]).reshape(shape).tobytes()
        entries.append((name, {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(b)]}))
        blobs.append(b)
        off += len(b)
    header = dict(reversed(entries))
    if meta:
        header["__metadata__"] = dict(meta)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((pad - len(text) % pad) % pad)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def index(path):
    with open(path, "rb") as f:
        raw = f.read()
    want = (json.dumps(json.loads(raw), indent=2, sort_keys=True) + "\n").encode()
    if raw != want:
        fail("%s differs from transformers' text:\n%s\nexpected:\n%s" % (path, raw.decode(), want.decode()))
    print("same")


if __name__ == "__main__":
    sys.stdout.reconfigure(encoding="utf-8", newline="\n")
    mode, path = sys.argv[1], sys.argv[2]
    if mode == "read":
        read(path)
    elif mode == "write":
        write(path, sys.argv[3:])
    elif mode == "index":
        index(path)
    else:
        fail("unknown mode %s" % mode)
