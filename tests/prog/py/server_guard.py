"""server_guard.py SERVER_CMD...: text_gen_server against the findings of
a reliability review (exposure, slow clients, shutdown, abandoned work,
HTTP nits; docs/inference.md), over real HTTP
on loopback. SERVER_CMD is a text_gen_server command line without --port;
each part starts its own server on --port 0 and reads the port from the
start-up line. The model has 32 positions. Prints ok / not ok lines."""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tap import Tap  # noqa: E402

cmd = sys.argv[1:]
tap = Tap()
check = tap.check
KEY = "sekrit-1"
PER_PROMPT = 0.05  # seconds one prompt of long_put takes on one slot (measured below)


class Server:
    """A text_gen_server on a port of the system's choice."""

    def __init__(self, *extra):
        self.log = tempfile.NamedTemporaryFile(prefix="guard", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd + ["--port", "0"] + list(extra), stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.port = self.addr = None
        end = time.time() + 60
        while time.time() < end and self.proc.poll() is None:
            m = re.search(r"on http://(\S+) \(port (\d+)\)", self.text())
            if m:
                self.addr, self.port = m.group(1), int(m.group(2))
                break
            time.sleep(0.05)

    def text(self):
        return open(self.log.name, errors="replace").read()

    def signal(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)

    def wait(self, timeout=30):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return "still running after %g s" % timeout

    def stop(self):
        if self.proc.poll() is None:
            self.signal()
        rc = self.wait()
        os.unlink(self.log.name)
        return rc


def request(method, path, body=None, headers=None, host="127.0.0.1", version="HTTP/1.1"):
    """The bytes of a request; a JSON body gets application/json unless
    headers say otherwise (a value None leaves the header out)."""
    h = {"Host": host}
    data = b""
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(data))
    h.update(headers or {})
    lines = ["%s %s %s" % (method, path, version)] + ["%s: %s" % (k, v) for k, v in h.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def read_response(s, head=False):
    """(status, headers with lower-case names, body) of one response on
    socket s; (None, {}, reason) when the connection ends first."""
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            d = s.recv(65536)
            if not d:
                return None, {}, "closed after %d bytes" % len(buf)
            buf += d
        top, rest = buf.split(b"\r\n\r\n", 1)
        lines = top.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdr = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
        if hdr.get("transfer-encoding") == "chunked" and not head:  # to the end (the request said close)
            while not rest.endswith(b"0\r\n\r\n"):
                d = s.recv(65536)
                if not d:
                    break
                rest += d
            return status, hdr, rest
        n = 0 if head else int(hdr.get("content-length", "0"))
        while len(rest) < n:
            d = s.recv(65536)
            if not d:
                break
            rest += d
        return status, hdr, rest
    except OSError as e:
        return None, {}, repr(e)


def call(port, raw, timeout=60, head=False, family=socket.AF_INET, addr="127.0.0.1"):
    s = socket.socket(family)
    s.settimeout(timeout)
    try:
        s.connect((addr, port))
        s.sendall(raw)
        return read_response(s, head)
    except OSError as e:
        return None, {}, repr(e)
    finally:
        s.close()


def jbody(r):
    try:
        return json.loads(r[2])
    except ValueError:
        return None


def closed_after(s, seconds):
    """How long until the server closes socket s (None: not within seconds)."""
    t0 = time.time()
    s.settimeout(seconds)
    try:
        while s.recv(4096):
            pass
        return time.time() - t0
    except socket.timeout:
        return None
    except OSError:
        return time.time() - t0


def prompts_for(seconds):
    """How many prompts make long_put last about that long on one slot."""
    return max(2, min(128, int(seconds / PER_PROMPT) + 1))


def long_put(seconds=None, n=128):
    """A request of n prompts (or about `seconds` of work on one slot), each
    sampled for 28 tokens (seeded, so that none ends early at the
    end-of-document token). 128 of them take seconds on one slot (about 11
    s with 2 layers of 32 on a 2-core machine): the parts that cut them off
    or hang up do not depend on the machine's speed."""
    return request("PUT", "/api", {"prompts": ["And God said"] * (prompts_for(seconds) if seconds else n),
                                   "tokens_to_generate": 28, "random_seed": 1})


# ---- exposure, the gate on headers, HTTP nits ----

srv = Server("--api-key", KEY)
P = srv.port
AUTH = {"Authorization": "Bearer " + KEY}
check("--port 0: the start-up line names the port the system chose", P is not None and P > 0, srv.text()[-500:])
listen = open("/proc/net/tcp").read().split("\n")[1:]
bound = [x.split()[1] for x in listen if x.split() and x.split()[3] == "0A" and x.split()[1].endswith(":%04X" % P)]
check("it listens on 127.0.0.1 only by default", bound == ["0100007F:%04X" % P], bound)

st, h, b = call(P, request("GET", "/v1/models", host="attacker.example:%d" % P, headers=AUTH))
check("Host attacker.example on loopback: 421, nothing read (DNS rebinding)",
      st == 421 and b"attacker.example" in b and b"data" not in b, (st, b))
for host in ["127.0.0.1:%d" % P, "localhost:%d" % P, "LocalHost", "[::1]:%d" % P, "127.0.0.1", "127.0.1.1:80"]:
    st = call(P, request("GET", "/v1/models", host=host, headers=AUTH))[0]
    check("Host %s: 200" % host, st == 200, st)
for host in ["127.0.0.1.evil.example", "localhost:80x", "[::1]x", "128.0.0.1", "localhost.evil.example"]:
    st = call(P, request("GET", "/health", host=host))[0]
    check("Host %s: 421" % host, st == 421, st)
st = call(P, request("GET", "/health", headers={"Host": None}))[0]
check("HTTP/1.1 without Host: 400", st == 400, st)
st = call(P, request("GET", "/health", headers={"Host": None}, version="HTTP/1.0"))[0]
check("HTTP/1.0 without Host: 200", st == 200, st)

body = {"prompt": "Hi", "max_tokens": 2}
st, h, b = call(P, request("POST", "/v1/completions", body))
check("no API key: 401 with WWW-Authenticate: Bearer", st == 401 and h.get("www-authenticate") == "Bearer", (st, h))
st = call(P, request("POST", "/v1/completions", body, {"Authorization": "Bearer sekrit-2"}))[0]
check("a wrong API key: 401", st == 401, st)
st = call(P, request("POST", "/v1/completions", body, {"Authorization": "Bearer sekrit-"}))[0]
check("a prefix of the API key: 401", st == 401, st)
st = call(P, request("POST", "/v1/completions", body, {"Authorization": "bearer " + KEY}))[0]
check("the API key (scheme in any case): 200", st == 200, st)
st, h, b = call(P, request("GET", "/v1/models"))
check("GET /v1/models needs the key (it names the checkpoint's folder)", st == 401 and b"data" not in b, (st, b))
check("GET /health and GET / need no key",
      call(P, request("GET", "/health"))[0] == 200 and call(P, request("GET", "/"))[0] == 200)

st = call(P, request("POST", "/v1/completions", body,
                     dict(AUTH, **{"Content-Type": "text/plain", "Origin": "http://evil.example"})))[0]
check("a cross-site POST with Content-Type text/plain: 415 (no generation)", st == 415, st)
st = call(P, request("PUT", "/api", {"prompts": ["Hi"], "tokens_to_generate": 1},
                     dict(AUTH, **{"Content-Type": None})))[0]
check("a body without Content-Type: 415", st == 415, st)
st = call(P, request("PUT", "/api", {"prompts": ["Hi"], "tokens_to_generate": 1},
                     dict(AUTH, **{"Content-Type": "Application/JSON ; charset=utf-8"})))[0]
check("Content-Type Application/JSON ; charset=utf-8: 200", st == 200, st)

s = socket.create_connection(("127.0.0.1", P), timeout=10)
s.sendall(request("HEAD", "/health", headers={"Connection": "close"}))
data = b""
while True:
    d = s.recv(4096)
    if not d:
        break
    data += d
s.close()
top, _, rest = data.partition(b"\r\n\r\n")
check("HEAD /health: 200, its headers, no body",
      top.startswith(b"HTTP/1.1 200") and b"Content-Length: 15" in top and rest == b"", data)
st, h, b = call(P, request("HEAD", "/"), head=True)
check("HEAD /: 200 text/html", st == 200 and h.get("content-type", "").startswith("text/html"), (st, h))
st, h, b = call(P, request("HEAD", "/api"), head=True)
check("HEAD /api: 405, Allow: PUT", st == 405 and h.get("allow") == "PUT", (st, h))

raw = (b"PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
       KEY.encode() + b"\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}")
st, h, b = call(P, raw)
check("two Content-Length headers: 400", st == 400 and b"Content-Length" in b, (st, b))
raw = (b"PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
       KEY.encode() + b"\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
st, h, b = call(P, raw)
check("Content-Length with Transfer-Encoding: 400", st == 400, (st, b))
t0 = time.time()
raw = (b"PUT /api HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer " +
       KEY.encode() + b"\r\nContent-Length: 1000000000\r\n\r\n")
st, h, b = call(P, raw, timeout=10)
check("a body announced over --max-body-bytes: 413 before it is sent (%.2f s)" % (time.time() - t0),
      st == 413 and time.time() - t0 < 2, (st, b))

# libmicrohttpd's line per reset connection: a few a minute
for i in range(40):  # each makes libmicrohttpd say "Socket has been disconnected when reading request"
    s = socket.create_connection(("127.0.0.1", P))
    s.sendall(request("PUT", "/api", b'{"prompts": ["a"]}', AUTH)[:-10])
    time.sleep(0.01)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()
time.sleep(0.3)
n = srv.text().count("libmicrohttpd")
check("40 reset connections write 1 to 6 lines to the log (%d)" % n, 1 <= n <= 6, srv.text()[-800:])
check("the server still answers after all that", call(P, request("GET", "/health"))[0] == 200)
rc = srv.stop()
check("it stops with 0 on SIGTERM", rc == 0, rc)

srv = Server("--host", "::1")
st = call(srv.port, request("GET", "/health", host="[::1]:%d" % (srv.port or 0)), family=socket.AF_INET6,
          addr="::1")[0] if srv.port else None
st2 = call(srv.port, request("GET", "/health", host="evil.example"), family=socket.AF_INET6,
           addr="::1")[0] if srv.port else None
check("--host ::1: serves on [::1], checks Host (%s, %s)" % (st, st2),
      srv.addr == "[::1]:%d" % (srv.port or 0) and st == 200 and st2 == 421, srv.text()[-300:])
srv.stop()

srv = Server("--host", "0.0.0.0")
listen = open("/proc/net/tcp").read().split("\n")[1:]
bound = [x.split()[1] for x in listen if x.split() and x.split()[3] == "0A" and x.split()[1].endswith(":%04X" %
                                                                                             (srv.port or 0))]
st = call(srv.port, request("GET", "/health", host="server.example:%d" % (srv.port or 0)))[0] if srv.port else None
check("--host 0.0.0.0: every address, any Host, a warning without --api-key",
      bound == ["00000000:%04X" % srv.port] and st == 200 and "without --api-key" in srv.text(), (bound, st))
srv.stop()

# ---- slow clients ----

srv = Server("--request-timeout", "1", "--max-concurrent-requests", "4", "--max-connections-per-ip", "24",
             "--inference-max-requests", "1")
P = srv.port
runs = []
for i in range(3):  # the fastest of three: other work on the machine only makes the long requests longer
    t0 = time.time()
    runs.append((call(P, long_put(n=4))[0], time.time() - t0))
PER_PROMPT = max(min(t for _, t in runs) / 4, 1e-3)
if all(st == 200 for st, _ in runs):
    print("# one prompt of the long requests below takes %.3f s on one slot" % PER_PROMPT)
else:
    check("the requests that time the engine are answered", False, runs)
stalled = []
for i in range(12):  # headers and part of a body, then nothing
    s = socket.create_connection(("127.0.0.1", P))
    s.sendall(request("PUT", "/api", b'{"prompts": ["a"], "tokens_to_generate": 2}')[:-20])
    stalled.append(s)
time.sleep(0.2)
st, h, b = call(P, request("PUT", "/api", {"prompts": ["Hi"], "tokens_to_generate": 2, "top_k": 1}))
check("12 stalled uploads do not count against --max-concurrent-requests 4: 200", st == 200, (st, b))
gone = [closed_after(s, 3) for s in stalled]
check("stalled uploads are closed at --request-timeout 1 (%s s)" % max(g or 99 for g in gone),
      all(g is not None and g < 2.5 for g in gone), gone)
for s in stalled:
    s.close()


def trickle(raw, period=0.25, seconds=6):
    """Send raw one byte every period; seconds until the server closes the
    connection (None: still open after the bytes or the time ran out)."""
    s = socket.create_connection(("127.0.0.1", P))
    t0 = time.time()
    try:
        for i in range(len(raw)):
            if time.time() - t0 > seconds:
                return None
            s.sendall(raw[i:i + 1])
            time.sleep(period)
            s.settimeout(0.001)
            try:
                if s.recv(4096) == b"":
                    return time.time() - t0
            except socket.timeout:
                pass
            except OSError:
                return time.time() - t0
        return None
    except OSError:
        return time.time() - t0
    finally:
        s.close()


body_raw = request("PUT", "/api", {"prompts": ["a" * 200], "tokens_to_generate": 2})
t = trickle(body_raw)
check("headers and body sent a byte every 0.25 s: closed after --request-timeout 1 (%s s)" % t,
      t is not None and 0.7 < t < 2.5, t)
t = trickle(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"x" * 100)
check("headers sent a byte every 0.25 s: closed after --request-timeout 1 (%s s)" % t,
      t is not None and 0.7 < t < 2.5, t)
s = socket.create_connection(("127.0.0.1", P))
s.sendall(request("GET", "/health"))
st = read_response(s)[0]
t = closed_after(s, 4)
s.close()
check("a kept-alive connection left idle is closed after --request-timeout 1 (%s s)" % t,
      st == 200 and t is not None and t < 2.5, (st, t))
# answers that take longer than --request-timeout to make are still sent
res = {}
n = prompts_for(2)
while True:  # until the first takes longer than 1.2 s (the machine's load may change)
    th = threading.Thread(target=lambda: res.update(a=call(P, long_put(n=n))))
    th.start()
    time.sleep(0.2)
    t0 = time.time()
    sse = call(P, request("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 3, "temperature": 0,
                                                      "stream": True}, {"Connection": "close"}))
    waited = time.time() - t0
    th.join()
    if waited > 1.2 or n == 128:
        break
    n = min(128, 2 * n)
check("an answer made for longer than --request-timeout 1 is sent (%s)" % res["a"][0],
      res["a"][0] == 200 and len(jbody(res["a"])["text"]) == n, res["a"][:2])
check("a stream that waited %.1f s for its slot gets its events" % waited,
      waited > 1.2 and sse[0] == 200 and b"data: [DONE]" in sse[2], sse)
many = [socket.create_connection(("127.0.0.1", P)) for _ in range(24)]
time.sleep(0.2)
extra = socket.create_connection(("127.0.0.1", P))
t = closed_after(extra, 2)
for s in many:
    s.close()
extra.close()
time.sleep(0.3)
check("a connection over --max-connections-per-ip 24 is closed at once (%s s)" % t, t is not None and t < 0.8, t)
check("and the server answers once they are gone", call(P, request("GET", "/health"))[0] == 200)
srv.stop()

# ---- hang-ups cancel the work ----

srv = Server("--inference-max-requests", "1")
P = srv.port
for stream in (False, True):
    s = socket.create_connection(("127.0.0.1", P))
    if stream:
        s.sendall(request("POST", "/v1/completions", {"prompt": ["And God said"] * 8, "n": 16,
                                                      "max_tokens": 28, "seed": 1, "stream": True}))
        s.recv(100)  # the first event
    else:
        s.sendall(long_put())
        time.sleep(0.5)
    s.close()
    t0 = time.time()
    st = call(P, request("PUT", "/api", {"prompts": ["Hi"], "tokens_to_generate": 2, "top_k": 1}))[0]
    t = time.time() - t0
    check("a %s client of 128 x 28 tokens hangs up: the next request is answered in %.2f s"
          % ("streaming" if stream else "waiting", t), st == 200 and t < 1.5, (st, t))
srv.stop()

# ---- the drain ----

srv = Server("--inference-max-requests", "1", "--drain-timeout", "1.5", "--request-timeout", "10")
P = srv.port
keep = socket.create_connection(("127.0.0.1", P), timeout=10)
keep.sendall(request("GET", "/health"))
st0 = read_response(keep)[0]
res = {}
th = threading.Thread(target=lambda: res.update(a=call(P, long_put())))
th.start()
time.sleep(0.5)
t0 = time.time()
srv.signal()
time.sleep(0.3)
try:
    socket.create_connection(("127.0.0.1", P), timeout=2).close()
    refused = "connected"
except ConnectionRefusedError:
    refused = "refused"
except OSError as e:
    refused = repr(e)
check("during the drain a new connection is refused at once (%s)" % refused, refused == "refused")
keep.sendall(request("GET", "/health"))
st, h, b = read_response(keep)
check("during the drain GET /health on a kept-alive connection: 503 draining, Connection: close",
      st0 == 200 and st == 503 and jbody((st, h, b)) == {"status": "draining"} and h.get("connection") == "close",
      (st0, st, h, b))
rc = srv.wait(10)
t = time.time() - t0
th.join()
check("a request still generating at --drain-timeout 1.5 is cut off: exit %s after %.2f s" % (rc, t),
      rc == 0 and 1.2 < t < 3.5 and res["a"][0] is None, (rc, t, res["a"][:2]))
check("the log says so", "--drain-timeout passed: cutting off the 1 request" in srv.text(), srv.text()[-600:])
srv.stop()

srv = Server("--inference-max-requests", "1")
P = srv.port
th = threading.Thread(target=lambda: res.update(b=call(P, long_put())))
th.start()
time.sleep(0.5)
t0 = time.time()
srv.signal(signal.SIGINT)
time.sleep(0.3)
srv.signal(signal.SIGINT)
rc = srv.wait(10)
t = time.time() - t0
th.join()
# (the drain would last --drain-timeout's default 25 s; 3 s leaves room for a loaded machine)
check("a second SIGINT cuts the drain short: exit %s after %.2f s" % (rc, t), rc == 0 and t < 3.0, (rc, t))
srv.stop()

srv = Server()
P = srv.port
body_raw = request("PUT", "/api", {"prompts": ["Hi"] * 30, "tokens_to_generate": 2})
s = socket.create_connection(("127.0.0.1", P))
s.sendall(body_raw[:-40])
stop = False


def drip():
    for i in range(40):
        if stop:
            return
        try:
            s.sendall(body_raw[-40 + i:-39 + i] if i < 39 else body_raw[-1:])
        except OSError:
            return
        time.sleep(0.3)


th = threading.Thread(target=drip)
th.start()
time.sleep(0.6)
t0 = time.time()
srv.signal()
rc = srv.wait(10)
t = time.time() - t0
stop = True
th.join()
s.close()
check("SIGTERM while a client trickles a body: exit %s after %.2f s (the upload holds nothing)" % (rc, t),
      rc == 0 and t < 1.5, (rc, t))
srv.stop()

sys.exit(1 if tap.failed else 0)
