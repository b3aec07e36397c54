"""browser_check.py BASE_URL EXPECTED.txt [API_KEY]: the page text_gen_server
serves at / in a real browser. Starts headless Chromium with the DevTools
protocol on a free port, opens the page, types a prompt into the box
(Input.insertText, as a keyboard would) and the API key when given,
clicks Generate with mouse events at the button, waits for the streamed
answer and checks it equals EXPECTED.txt (the greedy
answer of /v1/completions for the same prompt and settings). The
WebSocket client is a minimal one written here (RFC 6455 text frames).
Prints ok / not ok lines; exit status 1 on a failure.
"""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap, free_port  # noqa: E402

base, expected_file = sys.argv[1], sys.argv[2]
API_KEY = sys.argv[3] if len(sys.argv) > 3 else ""
PROMPT = "In the beginning God created"
MAX_TOKENS = "20"  # with temperature 0 (the page's default): greedy


class WS:
    def __init__(self, url):
        rest = url.split("://", 1)[1]
        hostport, path = rest.split("/", 1)
        host, port = hostport.split(":")
        self.s = socket.create_connection((host, int(port)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.s.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head
        self.id = 0

    def _exact(self, n):
        b = b""
        while len(b) < n:
            chunk = self.s.recv(n - len(b))
            if not chunk:
                raise EOFError("websocket closed")
            b += chunk
        return b

    def send(self, text):
        data = text.encode()
        head = bytes([0x81])
        n = len(data)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.s.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def recv(self):
        out = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            if b0 & 0x0F == 0x9:  # ping
                continue
            out += payload
            if b0 & 0x80:
                return out.decode()

    def call(self, method, **params):
        self.id += 1
        self.send(json.dumps({"id": self.id, "method": method, "params": params}))
        while True:
            m = json.loads(self.recv())
            if m.get("id") == self.id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m.get("result", {})


def evaluate(ws, expr):
    r = ws.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
    return r.get("result", {}).get("value")


tap = Tap()
check = tap.check


browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
if not browser:
    check("a Chromium to drive (Debian package chromium)", False)
    sys.exit(1)
port = free_port()
profile = tempfile.mkdtemp(prefix="chromium")
proc = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                         "--disable-dev-shm-usage", "--remote-debugging-port=%d" % port,
                         "--user-data-dir=" + profile, "about:blank"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    target = None
    for _ in range(300):
        try:
            pages = json.load(urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=1))
            target = next(p for p in pages if p.get("type") == "page")
            break
        except Exception:
            time.sleep(0.1)
    check("headless Chromium starts with the DevTools protocol", target is not None)
    ws = WS(target["webSocketDebuggerUrl"])
    ws.call("Page.enable")
    ws.call("Page.navigate", url=base + "/")
    for _ in range(200):
        if evaluate(ws, "document.readyState === 'complete' && !!document.getElementById('go')"):
            break
        time.sleep(0.05)
    check("the page loads", evaluate(ws, "document.title") == "megac text_gen_server")
    evaluate(ws, "document.getElementById('max').select()")
    ws.call("Input.insertText", text=MAX_TOKENS)
    evaluate(ws, "document.getElementById('prompt').focus()")
    ws.call("Input.insertText", text=PROMPT)
    check("the prompt is typed into the box", evaluate(ws, "document.getElementById('prompt').value") == PROMPT)
    if API_KEY:
        evaluate(ws, "document.getElementById('key').focus()")
        ws.call("Input.insertText", text=API_KEY)
        check("the API key is typed into its box", evaluate(ws, "document.getElementById('key').value") == API_KEY)
    box = evaluate(ws, "(() => { const r = document.getElementById('go').getBoundingClientRect();"
                       " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    for kind in ("mousePressed", "mouseReleased"):
        ws.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
    status = ""
    for _ in range(600):
        status = evaluate(ws, "document.getElementById('status').textContent")
        if status.startswith("done") or status.startswith("error"):
            break
        time.sleep(0.05)
    answer = evaluate(ws, "document.getElementById('answer') ? document.getElementById('answer').textContent : null")
    want = open(expected_file).read()
    check("the answer streams in and finishes (%s)" % status, status.startswith("done"), status)
    check("the page shows the greedy answer of /v1/completions", answer == want, (answer, want))
finally:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(profile, ignore_errors=True)
sys.exit(1 if tap.failed else 0)
