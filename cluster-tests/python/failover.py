#!/usr/bin/env python3
"""A Python client given ONE endpoint survives the death of that node.

A Producer and a SimpleConsumer are given a single endpoint, node X (the Python client cannot
take a list). The producer sends one message at a time; after --before acknowledged sends the
script SIGKILLs node X (--kill-pid). Routes spread the topic's queues over every member, each at
its own endpoint, so the client's own retry (the next queue, on the next broker) must carry the
sends to the surviving nodes: they must be acknowledged again within --resume-within seconds,
until --after more are. Then the SimpleConsumer, still given only X, must receive every
acknowledged message through the survivors (at least once; duplicates are counted, not failed).

Reports the longest gap between two acknowledged sends and the number of failed sends, and
prints one line `RESULT key=value ...` on stdout for the test driver.

The topic and the group must exist. Exit 0 on success, 1 on a failed check, 2 on timeout.
"""

import argparse
import os
import signal
import time

from common import add_common_args, fail, finish, log, setup, start_watchdog
from rocketmq import FilterExpression, Message, Producer, SimpleConsumer

LONG_POLL = 3  # seconds per ReceiveMessage
INVISIBLE = 30  # seconds; an ack that fails (its node died) means a redelivery after this


def brief(e):
    """One line for an error: a gRPC status and its details, else the exception."""
    try:
        return f"{e.code().name}: {e.details()}"
    except Exception:
        return repr(e)


def send_all(producer, topic, pid, before, after, resume_within):
    """Sends until `after` sends are acknowledged after the kill; returns (acked ids in order,
    ack times, failed count, kill time)."""
    acked, times = [], []
    failed = 0
    killed_at = None
    i = 0
    while True:
        now = time.monotonic()
        if killed_at is None and len(acked) >= before:
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            log(f"SIGKILLed node X (pid {pid}) after {len(acked)} acknowledged sends")
        if killed_at is not None:
            after_kill = sum(1 for t in times if t > killed_at)
            if after_kill >= after:
                return acked, times, failed, killed_at
            last = max(killed_at, times[-1] if times else killed_at)
            if now - last > resume_within:
                fail(f"no send acknowledged for {now - last:.1f} s after the kill ({after_kill} since, {failed} failed)")
        msg = Message()
        msg.topic = topic
        msg.body = f"failover-{i}".encode()
        msg.keys = f"failover-{i}"
        msg.tag = "failover"
        i += 1
        try:
            receipt = producer.send(msg)
        except Exception as e:  # the client's own attempts (3) all failed
            failed += 1
            if failed <= 5 or failed % 50 == 0:
                log(f"send {i - 1} failed ({failed} so far): {brief(e)}")
            time.sleep(0.05)
            continue
        acked.append(receipt.message_id)
        times.append(time.monotonic())


def longest_gap(times):
    """(gap seconds, index of the ack that ended it)."""
    gaps = [(b - a, k + 1) for k, (a, b) in enumerate(zip(times, times[1:]))]
    return max(gaps) if gaps else (0.0, 0)


def receive_all(consumer, wanted, seconds):
    """Receives and acks until every id in `wanted` was seen; returns (seen, duplicates,
    receive errors)."""
    seen, duplicates, errors = set(), 0, 0
    deadline = time.monotonic() + seconds
    while not wanted <= seen and time.monotonic() < deadline:
        try:
            msgs = consumer.receive(32, INVISIBLE)
        except Exception as e:  # a receive from a queue listed under the dead node
            errors += 1
            if errors <= 5:
                log(f"receive error (retrying): {brief(e)}")
            time.sleep(0.1)
            continue
        for m in msgs:
            if m.message_id in seen:
                duplicates += 1
            seen.add(m.message_id)
            try:
                consumer.ack(m)
            except Exception as e:
                log(f"ack of {m.message_id} failed (it will come back): {brief(e)}")
    return seen, duplicates, errors


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--kill-pid", type=int, required=True, help="pid of the node behind --endpoints")
    parser.add_argument("--before", type=int, default=100, help="acknowledged sends before the kill")
    parser.add_argument("--after", type=int, default=300, help="acknowledged sends after the kill")
    parser.add_argument("--resume-within", type=float, default=30.0,
                        help="fail if no send is acknowledged for this long after the kill (stuck)")
    args = parser.parse_args()
    if ";" in args.endpoints or "," in args.endpoints:
        fail("give exactly one endpoint")
    start_watchdog(240)
    config = setup(args)

    # Both start while X lives: the Python client asks only its configured endpoint for routes,
    # and keeps the last route it got when that endpoint is gone.
    consumer = SimpleConsumer(config, args.group, {args.topic: FilterExpression()}, await_duration=LONG_POLL)
    producer = Producer(config, (args.topic,))
    try:
        consumer.startup()
        producer.startup()
    except Exception as e:
        fail(f"startup failed: {e!r}")
    log(f"producer and consumer started, given only {args.endpoints}")

    acked, times, failed, killed_at = send_all(
        producer, args.topic, args.kill_pid, args.before, args.after, args.resume_within)
    gap, end = longest_gap(times)
    first_after = next(t for t in times if t > killed_at)
    log(f"{len(acked)} sends acknowledged, {failed} failed; longest gap between two acknowledged sends "
        f"{gap * 1000:.0f} ms (ending at ack {end}); first ack {(first_after - killed_at) * 1000:.0f} ms after the kill")

    wanted = set(acked)
    seen, duplicates, errors = receive_all(consumer, wanted, 90)
    missing = wanted - seen
    if missing:
        fail(f"{len(missing)} of {len(wanted)} acknowledged messages never received, e.g. {sorted(missing)[:5]}")
    log(f"the consumer received all {len(wanted)} acknowledged messages ({duplicates} duplicates, "
        f"{errors} receive errors on the way)")
    print(f"RESULT acked={len(acked)} failed={failed} gap_ms={gap * 1000:.0f} "
          f"first_ack_after_kill_ms={(first_after - killed_at) * 1000:.0f} duplicates={duplicates} "
          f"receive_errors={errors}", flush=True)
    for client in (producer, consumer):
        try:
            client.shutdown()
        except Exception as e:
            log(f"shutdown: {e!r}")
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
