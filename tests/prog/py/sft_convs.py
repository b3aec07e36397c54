"""sft_convs.py - the conversations of train_sft.sh, written two ways.

    sft_convs.py OUT_DIR N PER_LINE

OUT_DIR/packed.jsonl holds N lines of PER_LINE conversations each (one
"messages" list, cut by Megatron at each system message); OUT_DIR/unpacked.jsonl
the same N*PER_LINE conversations, one a line, in the same order. Every
conversation is a system turn, a user turn of random lower-case letters
(unpredictable) and an assistant turn that always says the same words.
"""
import json
import random
import sys

out, n, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(20261202)
convs = []
for i in range(n * per):
    user = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(6, 14)))
    convs.append([{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": user},
                  {"role": "assistant", "content": "Yes, it is."}])
with open(f"{out}/packed.jsonl", "w") as f:
    for j in range(n):
        f.write(json.dumps({"messages": [m for c in convs[j * per:(j + 1) * per] for m in c]}) + "\n")
with open(f"{out}/unpacked.jsonl", "w") as f:
    for c in convs:
        f.write(json.dumps({"messages": c}) + "\n")
