"""check_null_dataset.py CORPUS PREFIX APPEND_EOD VOCAB [KEY...]

An independent reading of Megatron's tools/preprocess_data.py (one partition)
for NullTokenizer input: builds the expected sequence lengths, document
boundaries and tokens of every key from the JSONL corpus, then reads
PREFIX_<key>_document.bin/.idx with numpy (layout from docs/formats.md) and
compares everything.
"""
import json
import sys

import numpy as np

corpus, prefix, append_eod, vocab = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
keys = sys.argv[5:] or ["text"]
eod = vocab - 1

for key in keys:
    lengths, docs, tokens = [], [0], []
    for line in open(corpus, encoding="utf-8"):
        if not line.strip():
            continue
        value = json.loads(line)[key]
        sentences = value if isinstance(value, list) else [value]
        doc, lens = [], []
        for s in sentences:
            ids = [int(x) for x in s.split(" ")] if s else []
            if ids:
                doc += ids
                lens.append(len(ids))
        if doc and append_eod:
            doc.append(eod)
            lens[-1] += 1
        tokens += doc
        lengths += lens
        docs.append(len(lengths))

    p = f"{prefix}_{key}_document"
    b = open(p + ".idx", "rb").read()
    assert b[:9] == b"MMIDIDX\x00\x00", "magic"
    version, code = int.from_bytes(b[9:17], "little"), b[17]
    S, D1 = int.from_bytes(b[18:26], "little"), int.from_bytes(b[26:34], "little")
    dtype = {8: np.uint16, 4: np.int32}[code]
    assert version == 1
    assert code == (8 if vocab < 65500 else 4), f"dtype code {code} for vocab {vocab}"
    assert len(b) == 34 + 12 * S + 8 * D1, "idx size"
    got_len = np.frombuffer(b, np.int32, S, 34)
    got_ptr = np.frombuffer(b, np.int64, S, 34 + 4 * S)
    got_doc = np.frombuffer(b, np.int64, D1, 34 + 12 * S)
    assert S == len(lengths), f"{key}: {S} sequences, expected {len(lengths)}"
    assert got_len.tolist() == lengths, f"{key}: lengths differ"
    assert got_doc.tolist() == docs, f"{key}: document indices differ"
    item = np.dtype(dtype).itemsize
    assert got_ptr.tolist() == list(np.concatenate([[0], np.cumsum(lengths)[:-1]]) * item) if S else True
    got_tok = np.fromfile(p + ".bin", dtype)
    assert got_tok.tolist() == tokens, f"{key}: tokens differ"
    print(f"{key}: {S} sequences, {D1 - 1} documents, {len(tokens)} tokens match")
