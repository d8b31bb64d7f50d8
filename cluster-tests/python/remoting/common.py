"""Helpers shared by the Remoting client scenarios (PyPI `rocketmq` 0.4.4, see requirements.txt).

Each script is one scenario run against a live RockRaft cluster: exit 0 on success, 1 on a
failed check, 2 on the overall timeout. Progress goes to stderr, one line per step.
"""

import os
import sys
import threading
import time

_NAME = os.path.basename(sys.argv[0])


def log(msg):
    print(f"[{_NAME} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def finish(code):
    # os._exit: the C++ client's threads may block interpreter exit; the verdict is decided.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def fail(msg):
    log(f"FAIL: {msg}")
    finish(1)


def start_watchdog(seconds):
    def expire():
        log(f"FAIL: timed out after {seconds} s")
        finish(2)

    t = threading.Timer(seconds, expire)
    t.daemon = True
    t.start()


def text(v):
    """The client hands strings back as bytes (or None)."""
    return v.decode() if isinstance(v, bytes) else (v or "")
