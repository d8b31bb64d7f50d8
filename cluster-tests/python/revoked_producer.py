#!/usr/bin/env python3
"""Two transactional Producers of the official Python client, each signed in as its own user, on
one TRANSACTION topic; the test takes one user's right away while both streams stay open.

- Before: halves are sent (by the producer that keeps its right) and left open until both
  producers' checkers have been asked about one, so both Telemetry streams are registered.
  Then "READY" goes to stdout and the script waits for a line on stdin: meanwhile the test
  revokes the other user's `pub` right, deletes it, or gives it a new secret.
- After: more halves are left open; each must be asked about, and only the kept producer's
  checker may be asked: the revoked one is sent no half's body at all.

The broker must check open halves after 1 s and then every second
(transaction_recovery_secs = 1, transaction_check_interval_secs = 1). Exit 0 on success, 1 on a
failed check, 2 on timeout (120 s).
"""

import argparse
import sys
import threading
import time
import uuid

from common import fail, finish, log, start_watchdog
from rocketmq import (ClientConfiguration, Credentials, Message, Producer, TransactionChecker,
                      TransactionResolution)

AFTER = 6  # halves sent once the right is gone
RUN = uuid.uuid4().hex[:8]


class Checker(TransactionChecker):
    """Records the body of every half it is asked about, and commits it."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.asked = []

    def check(self, message):
        b = message.body.decode(errors="replace")
        log(f"{self.name} asked about {b}")
        with self.lock:
            self.asked.append(b)
        return TransactionResolution.COMMIT

    def bodies(self):
        with self.lock:
            return list(self.asked)


def producer(endpoints, topic, ak, sk, checker):
    config = ClientConfiguration(endpoints, Credentials(ak, sk), request_timeout=5)
    p = Producer(config, (topic,), checker)
    p.startup()
    return p


def open_half(p, topic, label):
    """Sends a half and leaves it open: only a checker can settle it."""
    msg = Message()
    msg.topic = topic
    msg.body = f"{label}-{RUN}".encode()
    msg.tag = "rockraft"
    p.send(msg, p.begin_transaction())
    return msg.body.decode()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--kept", nargs=2, metavar=("AK", "SK"), required=True)
    parser.add_argument("--revoked", nargs=2, metavar=("AK", "SK"), required=True)
    args = parser.parse_args()
    start_watchdog(120)

    kept_checker, revoked_checker = Checker("kept"), Checker("revoked")
    kept = producer(args.endpoints, args.topic, *args.kept, kept_checker)
    producer(args.endpoints, args.topic, *args.revoked, revoked_checker)

    # Before: until each producer has been asked about one half, and every half is settled (so
    # no question is still on its way when the right goes).
    sent = []
    deadline = time.monotonic() + 45
    while not (kept_checker.bodies() and revoked_checker.bodies()):
        if time.monotonic() > deadline:
            fail(f"before the revocation, not both producers were asked: kept {kept_checker.bodies()}, "
                 f"revoked {revoked_checker.bodies()}")
        if len(sent) < 8:
            sent.append(open_half(kept, args.topic, f"before-{len(sent)}"))
        time.sleep(1)
    while not set(sent) <= set(kept_checker.bodies()) | set(revoked_checker.bodies()):
        if time.monotonic() > deadline:
            fail("the halves sent before the revocation were not all settled")
        time.sleep(0.5)
    log(f"both producers were asked: kept {len(kept_checker.bodies())}, revoked {len(revoked_checker.bodies())}")
    before = len(revoked_checker.bodies())

    print("READY", flush=True)
    if not sys.stdin.readline():
        fail("the test went away")
    log("the revoked producer's right is gone; sending more halves")

    after = [open_half(kept, args.topic, f"after-{n}") for n in range(AFTER)]
    deadline = time.monotonic() + 45
    while not set(after) <= set(kept_checker.bodies()):
        if time.monotonic() > deadline:
            missing = set(after) - set(kept_checker.bodies())
            fail(f"the producer still allowed was not asked about {sorted(missing)}")
        time.sleep(0.5)
    overheard = revoked_checker.bodies()[before:]
    if overheard:
        fail(f"the revoked producer was asked about {overheard} after its right was gone")
    log(f"the kept producer was asked about all {AFTER} halves; the revoked one about none")
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
