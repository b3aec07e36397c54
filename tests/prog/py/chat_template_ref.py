"""chat_template_ref.py - the reference of tests/prog/chat_template.sh.

    chat_template_ref.py convs OUT.jsonl
        writes the test conversations (one JSON object a line: messages,
        add_generation_prompt, bos_token, eos_token, tools, extra)
    chat_template_ref.py render OUTDIR CONVS.jsonl TEMPLATE.jinja...
        into OUTDIR/NAME.ref for each TEMPLATE (NAME.jinja), renders each conversation as transformers' apply_chat_template does
        (its own _compile_jinja_template: jinja2's sandbox with trim_blocks,
        lstrip_blocks, loop controls, its tojson, raise_exception and
        strftime_now; the same keyword arguments): {"text": ...} or
        {"error": ...} a line
    chat_template_ref.py compare NAME OURS.jsonl REF.jsonl
        byte-identical texts, and an error exactly where jinja2 has one;
        prints the count, or the first differences
"""
import json
import sys


def conversations():
    sys_msg = {"role": "system", "content": "You are a helpful assistant."}
    u1 = {"role": "user", "content": "Hello, how are you?"}
    a1 = {"role": "assistant", "content": "I'm fine, thanks. How can I help?"}
    u2 = {"role": "user", "content": "Tell me a joke about C."}
    a2 = {"role": "assistant", "content": "Why did the C programmer quit? He didn't get arrays."}
    convs = [
        [u1],
        [sys_msg, u1],
        [u1, a1],
        [u1, a1, u2],
        [sys_msg, u1, a1, u2, a2],
        [sys_msg, u1, a1, u2],
        [{"role": "user", "content": ""}],
        [{"role": "system", "content": ""}, {"role": "user", "content": "hi"}],
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}],
        [{"role": "user", "content": "Grüße aus Köln — 你好，世界 🌍 Ελληνικά"},
         {"role": "assistant", "content": "こんにちは! Привет, ça va? ✓"}],
        [{"role": "user", "content": "quotes ' \" and \\ backslashes \\n {{ not a tag }} {% neither %}"}],
        [{"role": "user", "content": "  \n\t padded with whitespace \t\n  "},
         {"role": "assistant", "content": "\n\nleading newlines\n\n"}],
        [{"role": "user", "content": "line one\nline two\r\nline three"}],
        [{"role": "user", "content": "\u3000ideographic space and nbsp\u00a0"}],
        [{"role": "user", "content": "think about it"},
         {"role": "assistant", "content": "<think>\nI should reply.\n</think>\n\nHere you go."},
         {"role": "user", "content": "again"}],
        [{"role": "user", "content": "what is 2+2?"},
         {"role": "assistant", "content": "<think>add</think>4"}],
        [sys_msg, {"role": "system", "content": "Second system message."}, u1],
        [u1, u2],
        [{"role": "assistant", "content": "I start."}, u1],
        [{"role": "user", "content": "<tool_response>x</tool_response>"}],
        [u1, {"role": "assistant", "content": None}],
        [{"role": "user", "content": "a" * 300 + " end"}],
    ]
    out = []
    for i, msgs in enumerate(convs):
        for agp in (False, True):
            out.append({"messages": msgs, "add_generation_prompt": agp, "bos_token": "<s>",
                        "eos_token": "</s>", "tools": None, "extra": {}})
    # special tokens absent, extra variables, tools
    out.append({"messages": [u1], "add_generation_prompt": True, "bos_token": None, "eos_token": None,
                "tools": None, "extra": {}})
    out.append({"messages": [u1], "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>",
                "tools": None, "extra": {"enable_thinking": False, "date_string": "01 Jan 2025"}})
    tool = {"type": "function", "function": {
        "name": "get_weather", "description": "Get the weather at a place, e.g. \"Paris\".",
        "parameters": {"type": "object", "properties": {
            "location": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["location"]}}}
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "abcdef123", "type": "function",
         "function": {"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}}]}
    out.append({"messages": [sys_msg, {"role": "user", "content": "Weather in Paris?"}], "add_generation_prompt": True,
                "bos_token": "<s>", "eos_token": "</s>", "tools": [tool], "extra": {}})
    out.append({"messages": [{"role": "user", "content": "Weather in Paris?"}, call,
                             {"role": "tool", "tool_call_id": "abcdef123", "name": "get_weather",
                              "content": "{\"temperature\": 21.5, \"sky\": \"clear\"}"}],
                "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>", "tools": [tool],
                "extra": {}})
    return out


def fixed_strftime_now(fmt):
    """strftime_now at MEGAC_TEMPLATE_DATE (YYYY-MM-DD[ HH:MM[:SS]]), as the C side reads it"""
    import datetime
    import os
    import re
    env = os.environ.get("MEGAC_TEMPLATE_DATE", "")
    if not env:
        return datetime.datetime.now().strftime(fmt)
    if env.isdigit():
        return datetime.datetime.fromtimestamp(int(env)).strftime(fmt)
    parts = [int(x) for x in re.findall(r"\d+", env)]
    return datetime.datetime(*parts).strftime(fmt)


def render_all(template_path, convs_path, out_path):
    from transformers.utils.chat_template_utils import _compile_jinja_template
    with open(template_path, encoding="utf-8") as f:
        tmpl = _compile_jinja_template(f.read())
    # the same clock as ours (transformers' strftime_now reads datetime.now())
    tmpl.globals["strftime_now"] = fixed_strftime_now
    with open(convs_path, encoding="utf-8") as f, open(out_path, "w", encoding="utf-8") as o:
        for line in f:
            c = json.loads(line)
            kw = dict(c.get("extra") or {})
            # the tokenizer's special tokens: only those it has
            for k in ("bos_token", "eos_token"):
                if c.get(k) is not None:
                    kw[k] = c[k]
            try:
                text = tmpl.render(messages=c["messages"], tools=c.get("tools"), documents=None,
                                   add_generation_prompt=c["add_generation_prompt"], **kw)
                res = {"text": text}
            except Exception as e:  # noqa: BLE001 - any failure is an error line
                res = {"error": "%s: %s" % (type(e).__name__, e)}
            o.write(json.dumps(res, ensure_ascii=False) + "\n")


def compare(name, ours_path, ref_path):
    with open(ours_path, encoding="utf-8") as f:
        ours = [json.loads(x) for x in f]
    with open(ref_path, encoding="utf-8") as f:
        ref = [json.loads(x) for x in f]
    if len(ours) != len(ref):
        print("%s: %d rendered lines, the reference has %d" % (name, len(ours), len(ref)))
        return 1
    bad = 0
    texts = errors = 0
    for i, (a, b) in enumerate(zip(ours, ref)):
        if "text" in b:
            texts += 1
            if a.get("text") != b["text"]:
                bad += 1
                if bad <= 3:
                    print("%s: conversation %d differs:\n  ours: %r\n  ref:  %r" % (name, i, a, b["text"]))
        else:
            errors += 1
            if "error" not in a:
                bad += 1
                if bad <= 3:
                    print("%s: conversation %d: jinja2 fails (%s), ours renders %r" % (name, i, b["error"], a))
    if bad:
        print("%s: %d of %d differ" % (name, bad, len(ref)))
        return 1
    print("%s: %d texts byte-identical, %d errors where jinja2 errs" % (name, texts, errors))
    return 0


def main():
    if sys.argv[1] == "convs":
        with open(sys.argv[2], "w", encoding="utf-8") as o:
            for c in conversations():
                o.write(json.dumps(c, ensure_ascii=False) + "\n")
        return 0
    if sys.argv[1] == "render":
        import os
        for t in sys.argv[4:]:
            name = os.path.basename(t)[: -len(".jinja")]
            render_all(t, sys.argv[3], os.path.join(sys.argv[2], name + ".ref"))
        return 0
    if sys.argv[1] == "compare":
        return compare(sys.argv[2], sys.argv[3], sys.argv[4])
    print("usage: see the top of the file", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
