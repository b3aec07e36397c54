"""sft_ref.py - the reference of tests/prog/sft_data.sh: Megatron's SFT
tokenizer (SFTTokenizer.tokenize_conversation) and packing
(SFTDataset.__getitem__), transcribed from reading them, on transformers
4.49's AutoTokenizer and apply_chat_template (tests/py-env.sh).

    sft_ref.py folder SRC OUT [--add TOKEN]... [--config JSON] [--template FILE]
        a tokenizer folder OUT for both sides: SRC's tokenizer.json (or
        tokenizer.json.xz, decompressed), TOKEN added to its added_tokens as
        special tokens with the next ids, and a tokenizer_config.json: SRC's
        (or {}) updated with the JSON object given, and chat_template set to
        FILE's text when given; tokenizer_class PreTrainedTokenizerFast
        unless SRC's config names one
    sft_ref.py samples OUTDIR JOB...
        JOB is NAME:FOLDER:FORMAT:SEQ_LENGTH:CP:CONVERSATIONS.jsonl; writes
        OUTDIR/NAME.ref, one JSON line per input line: tokens, labels,
        loss_mask, position_ids, cu_seqlens (unpadded) and max_seqlen, or
        {"error": ...} where Megatron raises (one python for all jobs:
        importing transformers is most of the time)
    sft_ref.py compare OURS.jsonl REF.jsonl
        the same samples, exactly, and errors on the same lines; prints the
        count, or the first difference

The input lines are read with json, not with the datasets library that
Megatron's SFTLowLevelDataset uses: the conversations here all have the same
keys, so Arrow's schema unification adds nothing.
"""
import json
import lzma
import os
import sys

IGNORE = -100

# Megatron's three templates, character for character: the "\n" are newline
# characters inside the Jinja string literals, as in Megatron's Python source
H_ALIGNED = ("{% for message in messages %}{% if message['role'] == 'system' %}"
             "{{ '<SPECIAL_10>System\n' + message['content'].strip() + '\n' }}"
             "{% elif message['role'] == 'user' %}"
             "{{ '<SPECIAL_11>User\n' + message['content'].strip() + '\n' + '<SPECIAL_11>Assistant\n' }}"
             "{% elif message['role'] == 'assistant' %}{{ message['content'].strip() + '\n' }}"
             "{% endif %}{% endfor %}")
NANO_V2 = ("{% for message in messages %}{% set content = message['content'] %}"
           "{% if message['role'] == 'system' %}"
           "{{ '<SPECIAL_10>System\n' + content.replace('/think', '').replace('/no_think', '').strip() + '\n' }}"
           "{% elif message['role'] == 'user' %}"
           "{{ '<SPECIAL_11>User\n' + content.replace('/think', '').replace('/no_think', '').strip() + '\n' }}"
           "{% elif message['role'] == 'assistant' %}"
           "{{ '<SPECIAL_11>Assistant\n' + content.strip() + '\n<SPECIAL_12>\n' }}"
           "{% endif %}{% endfor %}")
IDENTITY = "{% for message in messages %}{{ message['content'] }}{% endfor %}"


def make_folder(args):
    src, out = args[0], args[1]
    add, config, template = [], {}, None
    i = 2
    while i < len(args):
        if args[i] == "--add":
            add.append(args[i + 1])
        elif args[i] == "--config":
            config = json.loads(args[i + 1])
        elif args[i] == "--template":
            with open(args[i + 1], encoding="utf-8") as f:
                template = f.read()
        else:
            sys.exit(f"sft_ref.py folder: unknown argument {args[i]}")
        i += 2
    p = os.path.join(src, "tokenizer.json")
    if os.path.exists(p):
        with open(p, encoding="utf-8") as f:
            tj = json.load(f)
    else:
        with lzma.open(p + ".xz", "rt", encoding="utf-8") as f:
            tj = json.load(f)
    if add:
        nxt = max([tj["model"]["vocab"][k] for k in tj["model"]["vocab"]] +
                  [t["id"] for t in tj.get("added_tokens", [])]) + 1
        for tok in add:
            tj.setdefault("added_tokens", []).append({
                "id": nxt, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                "normalized": False, "special": True})
            nxt += 1
    cfg = {}
    p = os.path.join(src, "tokenizer_config.json")
    if os.path.exists(p):
        with open(p, encoding="utf-8") as f:
            cfg = json.load(f)
    # a plain fast tokenizer unless SRC says which class (AutoTokenizer would
    # otherwise guess the class from the folder's name)
    cfg.setdefault("tokenizer_class", "PreTrainedTokenizerFast")
    cfg.update(config)
    if template is not None:
        cfg["chat_template"] = template
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)


class Sft:
    """The prompt formats and per-turn masking of Megatron's SFT tokenizer."""

    def __init__(self, folder, fmt):
        import transformers
        tok = transformers.AutoTokenizer.from_pretrained(folder)
        self.tok, self.fmt = tok, fmt
        if fmt == "nemotron-nano-v2":
            self.prefix, self.pad, self.template, self.has_bos = 3, tok.convert_tokens_to_ids("<unk>"), NANO_V2, False
        elif fmt == "nemotron-h-aligned":
            self.prefix, self.pad = 0, tok.convert_tokens_to_ids("<SPECIAL_233>")
            self.template, self.has_bos = H_ALIGNED, False
        elif fmt == "identity":
            self.prefix, self.pad, self.template, self.has_bos = 0, tok.convert_tokens_to_ids("<unk>"), IDENTITY, False
        elif fmt == "default":
            self.prefix = 0
            self.pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
            self.template, self.has_bos = tok.chat_template, tok.bos_token_id is not None
        else:
            raise ValueError(f"unknown SFT prompt format {fmt}")
        if self.pad is None:
            raise ValueError(f"no pad token for {fmt}")

    def ids(self, msgs, add_generation_prompt=False):
        import numpy as np
        r = self.tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=add_generation_prompt,
                                         return_tensors="np", chat_template=self.template)
        r = np.asarray(r)
        return [int(x) for x in (r[0] if r.ndim == 2 else r)]

    def conversation(self, conv):
        tokens = self.ids(conv)
        target = list(tokens)
        if self.fmt == "default":
            return tokens, target
        at = 0
        for k, turn in enumerate(conv):
            role = turn["role"].lower()
            if role == "assistant" and len(turn["content"]) == 0:
                raise ValueError("empty assistant turn")
            # conv[k - 1]: for the first turn Python's index -1, the last turn
            if role == "assistant" and conv[k - 1]["role"].lower() not in ("user", "tool"):
                raise ValueError("assistant turn not after a user or tool turn")
            part = self.ids([turn])
            if self.has_bos and k > 0:
                part = part[1:]
            n = len(part)
            if role in ("system", "user", "tool"):
                for j in range(at, min(at + n, len(target))):
                    target[j] = IGNORE
            elif role == "assistant":
                for j in range(at, min(at + self.prefix, len(target))):
                    target[j] = IGNORE
            else:
                raise ValueError("bad role")
            if tokens[at:at + n] != part:
                raise ValueError("turn tokens differ from the conversation's")
            at += n
        if at != len(tokens):
            raise ValueError("turns do not add up to the conversation")
        return tokens, target


def split(messages):
    out, cur = [], []
    for m in messages:
        if m["role"] == "system":
            if cur:
                out.append(cur)
            cur = [m]
        else:
            cur.append(m)
    if cur:
        out.append(cur)
    return out


def pack(sft, messages, seq, cp):
    pad = sft.pad
    toks, tgts, pos, cu = [], [], [], [0]

    def grow(n):
        toks.extend([pad] * n)
        tgts.extend([pad] * n)
        last = pos[-1]
        pos.extend(range(last + 1, last + 1 + n))

    for conv in split(messages):
        t, g = sft.conversation(conv)
        toks.extend(t)
        tgts.extend(g)
        pos.extend(range(len(t)))
        if cp > 1:
            r = len(toks) % (2 * cp)
            if r:
                grow(2 * cp - r)
        cu.append(len(toks))
        if len(toks) >= seq + 1:
            del toks[seq:], tgts[seq:], pos[seq + 1:]
            toks.append(pad)
            tgts.append(pad)
            cu[-1] = seq
            break
    if len(toks) < seq + 1:
        grow(seq + 1 - len(toks))
        cu[-1] = len(toks) - 1
    assert len(toks) == len(tgts) == len(pos) == seq + 1
    labels = tgts[1:]
    mask = [0 if lab == pad or lab == IGNORE else 1 for lab in labels]
    return {"tokens": toks[:-1], "labels": labels, "loss_mask": mask, "position_ids": pos[:-1],
            "cu_seqlens": cu, "max_seqlen": max(cu[i + 1] - cu[i] for i in range(len(cu) - 1))}


def samples(outdir, *jobs):
    for job in jobs:
        name, folder, fmt, seq, cp, path = job.split(":")
        with open(path, encoding="utf-8") as f:
            convs = [json.loads(x)["messages"] for x in f]
        sft = Sft(folder, fmt)
        with open(os.path.join(outdir, name + ".ref"), "w", encoding="utf-8") as out:
            for m in convs:
                try:
                    r = pack(sft, m, int(seq), int(cp))
                except ValueError as e:
                    r = {"error": str(e)}
                out.write(json.dumps(r) + "\n")


def compare(ours, ref):
    with open(ours, encoding="utf-8") as f:
        a = [json.loads(x) for x in f]
    with open(ref, encoding="utf-8") as f:
        b = [json.loads(x) for x in f]
    if len(a) != len(b):
        sys.exit(f"{len(a)} samples, the reference has {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if ("error" in x) != ("error" in y):
            sys.exit(f"sample {i + 1}: ours {x.get('error', 'is a sample')}, the reference's "
                     f"{y.get('error', 'is a sample')}")
        for k in y:
            if k != "error" and x.get(k) != y[k]:
                sys.exit(f"sample {i + 1}: {k} differs:\n  ours {x.get(k)}\n  ref  {y[k]}")
    errs = sum("error" in s for s in b)
    b = [s for s in b if "error" not in s]
    masked = sum(s["loss_mask"].count(0) for s in b)
    print(f"{len(b)} samples identical ({sum(len(s['cu_seqlens']) - 1 for s in b)} conversations, "
          f"{masked} of {sum(len(s['loss_mask']) for s in b)} labels masked, {errs} lines refused)")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "folder":
        make_folder(args)
    elif cmd == "samples":
        samples(*args)
    elif cmd == "compare":
        compare(*args)
    else:
        sys.exit(f"sft_ref.py: unknown command {cmd}")


if __name__ == "__main__":
    main()
