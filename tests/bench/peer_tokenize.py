"""peer_tokenize.py LIB CORPUS.jsonl GPT2_DIR

The peer side of preprocess_bench.sh: one thread reading the same JSONL,
json.loads per line, encoding "text" with GPT-2 through LIB ("tokenizers" =
Hugging Face tokenizers, what Megatron's GPT2BPETokenizer now calls, or
"tiktoken"), the way Megatron's encode() does per document. Prints
"MBPS <MB/s> TOKPS <tokens/s> TOKENS <n>" on success, or "SKIP <why>".
"""
import json
import os
import sys
import time

lib, corpus, gpt2 = sys.argv[1], sys.argv[2], sys.argv[3]
try:
    if lib == "tokenizers":
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(os.path.join(gpt2, "tokenizer.json"))
        encode = lambda s: tok.encode(s, add_special_tokens=True).ids
    elif lib == "tiktoken":
        import tiktoken
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks

        ranks = data_gym_to_mergeable_bpe_ranks(os.path.join(gpt2, "gpt2-merges.txt"),
                                                os.path.join(gpt2, "gpt2-vocab.json"))
        enc = tiktoken.Encoding("gpt2", pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
                                mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
        encode = lambda s: enc.encode(s, allowed_special="all")
    else:
        raise ImportError("unknown peer " + lib)
except Exception as e:  # not installed, or files missing
    print("SKIP", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    sys.exit(0)

lines = open(corpus, "rb").read().splitlines(keepends=True)
t0 = time.perf_counter()
n_tok = 0
n_bytes = 0
for line in lines:
    n_bytes += len(line)
    n_tok += len(encode(json.loads(line)["text"]))
dt = time.perf_counter() - t0
print("MBPS %.3f TOKPS %.0f TOKENS %d" % (n_bytes / dt / 2**20, n_tok / dt, n_tok))
