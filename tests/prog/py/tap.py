"""tap.py - what the Python test drivers share: ok / not ok lines (the
harness counts them) and waiting for a server under test to answer."""
import socket
import time
import urllib.request


class Tap:
    def __init__(self):
        self.failed = 0

    def check(self, name, cond, why=""):
        print(("ok - " if cond else "not ok - ") + name)
        if not cond:
            self.failed += 1
            if why:
                print("#   " + str(why).replace("\n", "\n#   "))
        return cond


def wait_health(base, seconds=60):
    """True once GET base/health answers 200."""
    end = time.time() + seconds
    while time.time() < end:
        try:
            with urllib.request.urlopen(base + "/health", timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def free_port():
    """A TCP port nobody listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
