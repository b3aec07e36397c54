"""chat_server_check.py - the checks of tests/prog/chat_server.sh: the prompt
of text_gen_server's /v1/chat/completions against transformers'
apply_chat_template (4.49, tests/py-env.sh).

    chat_server_check.py NAME:PORT:FOLDER:TEMPLATE...

Each server (on 127.0.0.1:PORT, its tokenizer the Hugging Face folder FOLDER;
TEMPLATE a file whose text it was given as --chat-template, or - for the
folder's own template) gets every conversation below with
"return_token_ids": true (megac's extension, as vLLM names it). Where
transformers renders the conversation, the server must answer 200 with
prompt_token_ids equal to apply_chat_template(messages, tools=...,
add_generation_prompt=True, tokenize=True, **chat_template_kwargs) and
usage.prompt_tokens their count; where the template raises, a 400 whose
error holds the template's message. Then, on each server, a message whose
content is not a string is refused with 400, a streamed answer has the
same text as the whole one, and /v1/completions' return_token_ids gives the
prompt's ids as the tokenizer encodes a completion's prompt (its
post-processor's tokens included).
"""
import json
import sys
import urllib.error
import urllib.request

sys.path.insert(0, "tests/prog/py")
from tap import Tap, wait_health  # noqa: E402

from transformers import AutoTokenizer  # noqa: E402

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

# (name, request fields besides max_tokens and temperature)
CONVERSATIONS = [
    ("system + user", {"messages": [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "What is 2+2?"}]}),
    ("multi-turn, unicode", {"messages": [
        {"role": "user", "content": "Name a café in Tōkyō — naïvely."},
        {"role": "assistant", "content": "Café 東京, on the corner."},
        {"role": "user", "content": "  And one in Zürich?\n\n"}]}),
    ("fields besides role and content", {"messages": [
        {"role": "user", "content": "Think first.", "name": "alice"},
        {"role": "assistant", "content": "Done.", "reasoning_content": "It is short."},
        {"role": "user", "content": "Again, with <|im_end|> and <|eot_id|> inside."}]}),
    ("tools and chat_template_kwargs", {"messages": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "Let me look."},
        {"role": "tool", "content": "{\"temp\": 21}"},
        {"role": "user", "content": "Thanks. And Rome?"}],
        "tools": [WEATHER], "chat_template_kwargs": {"enable_thinking": False}}),
    ("two user turns in a row", {"messages": [
        {"role": "user", "content": "First."},
        {"role": "user", "content": "Second."}]}),
]


def call(port, path, body):
    req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), data=json.dumps(body).encode(),
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def reference(tok, template, conv):
    """(ids, None) or (None, the template's message)."""
    kwargs = dict(conv.get("chat_template_kwargs") or {})
    try:
        ids = tok.apply_chat_template(conv["messages"], tools=conv.get("tools"), add_generation_prompt=True,
                                      tokenize=True, chat_template=template, **kwargs)
        return list(ids), None
    except Exception as e:  # jinja2's TemplateError from raise_exception
        return None, str(e)


def main():
    tap = Tap()
    same = refused = 0
    toks = {}
    for spec in sys.argv[1:]:
        name, port, folder, tfile = spec.split(":", 3)
        template = None if tfile == "-" else open(tfile, encoding="utf-8").read()
        if folder not in toks:
            toks[folder] = AutoTokenizer.from_pretrained(folder)
        tok = toks[folder]
        if not tap.check("%s: the server answers" % name, wait_health("http://127.0.0.1:%s" % port)):
            continue
        for cname, conv in CONVERSATIONS:
            want, why = reference(tok, template, conv)
            body = dict(conv, max_tokens=1, temperature=0, return_token_ids=True)
            st, text = call(port, "/v1/chat/completions", body)
            label = "%s: %s" % (name, cname)
            if want is not None:
                r = json.loads(text) if st == 200 else {}
                got = r.get("prompt_token_ids")
                ok = st == 200 and got == want and r["usage"]["prompt_tokens"] == len(want)
                diff = "" if ok else (st, text[:300], "want", want[:40], "got", (got or [])[:40])
                tap.check("%s: the prompt is apply_chat_template's %d ids" % (label, len(want)), ok, diff)
                same += ok
            else:
                err = json.loads(text).get("error", "") if text.startswith("{") else text
                ok = st == 400 and why in err
                tap.check("%s: 400, as the template raises %r" % (label, why), ok, (st, text))
                refused += ok
        st, text = call(port, "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "hi"}]}]})
        tap.check("%s: content parts are refused (400, naming the message)" % name,
                  st == 400 and "messages[0]" in text and "content" in text, (st, text))
        prompt = "Hello, Zürich <|im_end|>"
        st, text = call(port, "/v1/completions", {"prompt": [prompt, "x"], "max_tokens": 2, "temperature": 0,
                                                  "return_token_ids": True})
        r = json.loads(text) if st == 200 else {}
        c = (r.get("choices") or [{}])[0]
        want = tok(prompt)["input_ids"]  # a completion's prompt: the post-processor's tokens added
        tap.check("%s: /v1/completions' return_token_ids: the prompt's ids as the tokenizer encodes them" % name,
                  st == 200 and c.get("prompt_token_ids") == want and len(c.get("token_ids", [])) == 2,
                  (st, text[:300], want))
        body = {"messages": CONVERSATIONS[1][1]["messages"], "max_tokens": 5, "temperature": 0}
        st, whole = call(port, "/v1/chat/completions", body)
        st2, events = call(port, "/v1/chat/completions", dict(body, stream=True))
        streamed = "".join(json.loads(line[6:])["choices"][0]["delta"].get("content", "")
                           for line in events.split("\n") if line.startswith("data: {"))
        content = json.loads(whole)["choices"][0]["message"]["content"] if st == 200 else None
        tap.check("%s: streamed, the same answer from the template's prompt" % name,
                  st == st2 == 200 and streamed == content, (st, st2, whole[:200], streamed))
    print("# %d prompts equal to apply_chat_template's, %d refusals as the template's" % (same, refused))
    return 1 if tap.failed else 0


if __name__ == "__main__":
    sys.exit(main())
