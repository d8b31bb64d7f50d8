#!/usr/bin/env python3
"""Dead-lettering through the official Python PushConsumer.

A PushConsumer whose listener always fails gets one fresh message. This non-FIFO client never
calls ForwardMessageToDeadLetterQueue: each failure is a ChangeInvisibleDuration (backoff), so
it is the broker that must move the message to %DLQ%<group> after --max-attempts deliveries.
Checks: the listener sees it exactly N times with delivery_attempt 1..N; a SimpleConsumer of
group <group>-dlq-reader then receives it from %DLQ%<group> (same message id or same body) and
acks it; the push consumer does not see it again.

The topic, the group (with max attempts N) and the group <group>-dlq-reader must exist.
Exit 0 on success, 1 on a failed check, 2 on timeout (120 s).
"""

import argparse
import threading
import time
import uuid

from common import add_common_args, fail, finish, log, produce_one, receive_until, setup, start_watchdog
from rocketmq import ConsumeResult, FilterExpression, MessageListener, PushConsumer, SimpleConsumer


class FailingListener(MessageListener):
    """Fails every delivery of the test message, recording its delivery_attempt values."""

    def __init__(self, body, max_attempts):
        self.body = body
        self.max_attempts = max_attempts
        self.attempts = []  # delivery_attempt of each delivery, in arrival order
        self.message_ids = set()
        self.lock = threading.Lock()
        self.reached = threading.Event()

    def consume(self, message):
        if message.body != self.body:
            log(f"acking unrelated message {message.message_id}")
            return ConsumeResult.SUCCESS
        with self.lock:
            self.attempts.append(message.delivery_attempt)
            self.message_ids.add(message.message_id)
            n = len(self.attempts)
        log(f"delivery {n}: {message.message_id} delivery_attempt {message.delivery_attempt}, failing it")
        if n >= self.max_attempts:
            self.reached.set()
        return ConsumeResult.FAILURE  # raising an exception would count as FAILURE too

    def snapshot(self):
        with self.lock:
            return list(self.attempts), set(self.message_ids)


def wait_for_assignment(consumer, seconds):
    """Waits until QueryAssignment has given the consumer at least one queue to receive from.
    Reads a private field of the pinned client version, for a clear error instead of a silent
    lack of deliveries."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        queues = getattr(consumer, "_PushConsumer__process_queues", None)
        if queues is None:
            log("cannot see assignments in this client version; waiting 5 s instead")
            time.sleep(5)
            return
        if len(queues.keys()) > 0:
            log(f"assigned queues: {', '.join(str(q) for q in queues.keys())}")
            return
        time.sleep(0.2)
    fail(f"PushConsumer got no queue from QueryAssignment within {seconds} s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--max-attempts", type=int, required=True,
                        help="the group's max delivery attempts before dead-lettering")
    parser.add_argument("--quiet-seconds", type=float, default=6,
                        help="how long the message must stay away after reaching the DLQ")
    args = parser.parse_args()
    if args.max_attempts < 1:
        parser.error("--max-attempts must be >= 1")
    start_watchdog(120)
    config = setup(args)
    n = args.max_attempts
    dlq_topic = f"%DLQ%{args.group}"
    body = f"push-dlq-{uuid.uuid4().hex}".encode()
    listener = FailingListener(body, n)

    push = PushConsumer(config, args.group, listener, {args.topic: FilterExpression()})
    try:
        push.startup()  # waits up to 10 s for the broker's Settings on the Telemetry stream
    except Exception as e:
        # 5.1.2 masks "no Settings within 10 s" as AttributeError(... 'shutdown').
        fail(f"PushConsumer startup failed (no Settings reply on Telemetry?): {e!r}")
    log(f"PushConsumer {args.group} started on {args.topic}")
    wait_for_assignment(push, 20)

    reader = SimpleConsumer(config, f"{args.group}-dlq-reader", {dlq_topic: FilterExpression()}, await_duration=5)
    try:
        reader.startup()
    except Exception as e:
        fail(f"SimpleConsumer startup on {dlq_topic} failed: {e!r}")

    message_id = produce_one(config, args.topic, body)

    if not listener.reached.wait(80):
        attempts, _ = listener.snapshot()
        fail(f"listener saw the message {len(attempts)} times in 80 s (delivery_attempt {attempts}), expected {n}")
    attempts, ids = listener.snapshot()
    if ids != {message_id}:
        fail(f"listener saw message ids {sorted(ids)}, expected only {message_id}")
    log(f"listener failed the message {len(attempts)} times")

    # Matched by body: the DLQ copy may get a new message id, but never another body.
    dead = receive_until(reader, body, 30, 10)
    if dead is None:
        fail(f"message {message_id} did not reach {dlq_topic} within 30 s of its {n}th failure")
    same_id = "same message id" if dead.message_id == message_id else f"new message id {dead.message_id}"
    log(f"found in {dlq_topic} ({same_id}, topic {dead.topic}, delivery_attempt {dead.delivery_attempt})")
    try:
        reader.ack(dead)
    except Exception as e:
        fail(f"ack of the dead-lettered message failed: {e!r}")
    log("acked the dead-lettered message")

    # Once dead-lettered, the original must not be delivered again.
    time.sleep(args.quiet_seconds)
    attempts, _ = listener.snapshot()
    if len(attempts) != n:
        fail(f"listener saw the message {len(attempts)} times (delivery_attempt {attempts}), expected exactly {n}")
    if attempts != list(range(1, n + 1)):
        fail(f"delivery_attempt values were {attempts}, expected {list(range(1, n + 1))}")
    log(f"no delivery after the DLQ for {args.quiet_seconds:g} s; delivery_attempt {attempts}")

    reader.shutdown()
    push.shutdown()
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
