"""drain_check.py PORT SERVER_CMD...: SIGTERM while four keep-alive clients
keep sending requests. The server must answer what it began, refuse what
comes after with 503 and Connection: close, and exit 0 within 30 s (a
request arriving on a kept-alive connection during the drain once hung it).
Prints an ok / not ok line."""
import http.client
import json
import signal
import subprocess
import sys
import threading
import time

port, cmd = int(sys.argv[1]), sys.argv[2:]
proc = subprocess.Popen(cmd + ["--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
for _ in range(600):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        if c.getresponse().status == 200:
            break
    except OSError:
        time.sleep(0.1)
stop = False
codes = []


def client():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    while not stop:
        try:
            c.request("PUT", "/api", body=json.dumps({"prompts": ["Hello"], "tokens_to_generate": 5, "top_k": 1}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            codes.append(r.status)
            if r.getheader("Connection") == "close":
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        except OSError:
            time.sleep(0.01)
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)


threads = [threading.Thread(target=client) for _ in range(4)]
for t in threads:
    t.start()
time.sleep(1)
proc.send_signal(signal.SIGTERM)
try:
    rc = proc.wait(timeout=30)
except subprocess.TimeoutExpired:
    rc = "hung"
    proc.kill()
stop = True
for t in threads:
    t.join()
ok = rc == 0 and 200 in codes and set(codes) <= {200, 503}
print(("ok" if ok else "not ok") + " - SIGTERM with keep-alive clients still sending: exit %s, answers %s" %
      (rc, sorted(set(codes))))
if not ok:
    print("#   " + proc.stderr.read().decode()[-1500:].replace("\n", "\n#   "))
sys.exit(0 if ok else 1)
