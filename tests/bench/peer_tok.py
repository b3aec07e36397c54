"""peer_tok.py KIND MODEL [CORPUS.jsonl]

The reference side of tok_bench.sh: the library each megac tokenizer copies,
encoding the same texts as build/bench/tok_speed (the "text" of every line of
examples/data/{kjv,fortunes}.jsonl.gz, or of CORPUS), one thread, JSON
already decoded, best of three passes after a first one:
  spm MODEL           sentencepiece's encode
  tiktoken-v2 VOCAB   tiktoken's encode(allowed_special="all") with Megatron's
                      TikTokenizer settings of the fixtures (vocab 5000, 1000
                      special tokens, pattern v2)
  hf DIR              Hugging Face tokenizers' encode_batch, one thread
Prints "MBPS <wall MB/s> CPU <CPU-time MB/s> TOKENS <n>" (MB = 10^6 bytes of
UTF-8 text), or "SKIP <why>" when the package is missing.
"""
import gzip
import importlib.util
import json
import lzma
import os
import sys
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))

kind, model = sys.argv[1], sys.argv[2]
corpus = sys.argv[3] if len(sys.argv) > 3 else None
try:
    if kind == "spm":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=model)
        encode_all = lambda texts: [sp.encode(t) for t in texts]
    elif kind == "tiktoken-v2":
        import tiktoken  # noqa: F401

        path = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "make_tiktoken_refs.py")
        spec = importlib.util.spec_from_file_location("mtr", path)
        mtr = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mtr)
        vocab = json.load(open(model, encoding="utf-8"))
        enc = mtr.encoding(vocab, *mtr.CONFIGS["v2"])
        encode_all = lambda texts: [enc.encode(t, allowed_special="all") for t in texts]
    elif kind == "hf":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
        encode_all = lambda texts: [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
    else:
        raise ImportError("unknown kind " + kind)
except Exception as e:  # not installed, or files missing
    print("SKIP", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    sys.exit(0)

names = [corpus] if corpus else [os.path.join(ROOT, "examples", "data", n) for n in ("kjv.jsonl.gz", "fortunes.jsonl.gz")]
texts = []
for name in names:
    op = gzip.open if name.endswith(".gz") else lzma.open if name.endswith(".xz") else open
    with op(name, "rt", encoding="utf-8") as f:
        texts += [json.loads(line)["text"] for line in f if line.strip()]
nbytes = sum(len(t.encode("utf-8")) for t in texts)
best = best_cpu = 0.0
for rep in range(4):
    t0, c0 = time.perf_counter(), time.process_time()
    ids = encode_all(texts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if rep:
        best, best_cpu = max(best, nbytes / wall / 1e6), max(best_cpu, nbytes / cpu / 1e6)
print("MBPS %.2f CPU %.2f TOKENS %d" % (best, best_cpu, sum(len(i) for i in ids)))
