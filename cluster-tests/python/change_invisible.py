#!/usr/bin/env python3
"""ChangeInvisibleDuration through the official Python SimpleConsumer.

Scenario 1: receive a fresh message (invisible 10 s), change its invisible duration to 2 s;
the answer carries a new receipt handle. The old handle still names the delivery (a client whose
answer to the change was lost holds only it): an ack with it must succeed, the same ack retried
with the new handle must be answered OK too, and the message must not come back afterwards.
Scenario 2: receive another fresh message, change it to 2 s and do not ack: it must come back
with the same message id and delivery_attempt 2, no sooner than ~1 s and well before the
original 10 s would have run out.

The topic and the group must exist. Exit 0 on success, 1 on a failed check, 2 on timeout (90 s).
"""

import argparse
import time
import uuid

from common import add_common_args, fail, finish, log, produce_one, receive_until, setup, start_watchdog
from rocketmq import FilterExpression, SimpleConsumer

RECEIVE_INVISIBLE = 10  # seconds; long enough that only ChangeInvisibleDuration can explain a quick return
NEW_INVISIBLE = 2  # seconds; the client sends whole seconds, the broker accepts >= 1 s
LONG_POLL = 5  # seconds per ReceiveMessage


def receive_fresh(consumer, config, topic, label):
    body = f"{label}-{uuid.uuid4().hex}".encode()
    message_id = produce_one(config, topic, body)
    msg = receive_until(consumer, body, 30, RECEIVE_INVISIBLE)
    if msg is None:
        fail(f"{label}: produced message {message_id} was not received within 30 s")
    if msg.message_id != message_id:
        fail(f"{label}: received message id {msg.message_id}, the send receipt said {message_id}")
    if msg.delivery_attempt != 1:
        fail(f"{label}: first delivery has delivery_attempt {msg.delivery_attempt}, expected 1")
    if not msg.receipt_handle:
        fail(f"{label}: received message has no receipt handle")
    log(f"{label}: received {message_id}, delivery_attempt 1")
    return msg


def either_handle_acks(consumer, config, topic):
    msg = receive_fresh(consumer, config, topic, "either-handle")
    old_handle = msg.receipt_handle
    changed_at = time.monotonic()
    try:
        consumer.change_invisible_duration(msg, NEW_INVISIBLE)
    except Exception as e:
        fail(f"change_invisible_duration({NEW_INVISIBLE} s) failed: {e!r}")
    # The client swaps the new handle into the same Message object; put the old one back to
    # ack with it.
    new_handle = msg.receipt_handle
    if not new_handle:
        fail("ChangeInvisibleDuration answered without a receipt handle")
    if new_handle == old_handle:
        fail("ChangeInvisibleDuration answered with the same receipt handle")
    log("changed invisible duration, got a new receipt handle")

    msg.receipt_handle = old_handle
    try:
        consumer.ack(msg)
    except Exception as e:
        fail(f"ack with the old (pre-ChangeInvisibleDuration) receipt handle failed: {e!r}")
    log("acked with the old receipt handle")

    msg.receipt_handle = new_handle
    try:
        consumer.ack(msg)
    except Exception as e:
        fail(f"the ack retried with the new receipt handle failed: {e!r}")
    log("the ack retried with the new receipt handle was answered OK")

    # Acked: it must stay gone after the 2 s would have run out.
    watch = max(3.0, NEW_INVISIBLE + 4 - (time.monotonic() - changed_at))
    back = receive_until(consumer, msg.body, watch, RECEIVE_INVISIBLE)
    if back is not None:
        fail(f"acked message {msg.message_id} was delivered again (delivery_attempt {back.delivery_attempt})")
    log("acked message stayed gone")


def redelivered_after_change(consumer, config, topic):
    msg = receive_fresh(consumer, config, topic, "redeliver")
    changed_at = time.monotonic()
    try:
        consumer.change_invisible_duration(msg, NEW_INVISIBLE)
    except Exception as e:
        fail(f"change_invisible_duration({NEW_INVISIBLE} s) failed: {e!r}")
    log(f"changed invisible duration to {NEW_INVISIBLE} s, not acking")

    again = receive_until(consumer, msg.body, 30, RECEIVE_INVISIBLE)
    elapsed = time.monotonic() - changed_at
    if again is None:
        fail(f"message {msg.message_id} did not come back within 30 s of its {NEW_INVISIBLE} s invisibility")
    if again.message_id != msg.message_id:
        fail(f"redelivered message id {again.message_id}, expected {msg.message_id}")
    if again.delivery_attempt != 2:
        fail(f"redelivery has delivery_attempt {again.delivery_attempt}, expected 2")
    # Timer granularity allowance below 2 s; above, one empty long poll plus slack, still far
    # from the original 10 s.
    if elapsed < 1.0:
        fail(f"message came back {elapsed:.2f} s after a {NEW_INVISIBLE} s invisible duration")
    if elapsed > RECEIVE_INVISIBLE - 1:
        fail(f"message came back only after {elapsed:.1f} s: the {NEW_INVISIBLE} s change did not take effect")
    log(f"redelivered after {elapsed:.1f} s with delivery_attempt 2")
    try:
        consumer.ack(again)
    except Exception as e:
        fail(f"ack of the redelivered message failed: {e!r}")
    log("acked the redelivery")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    args = parser.parse_args()
    start_watchdog(90)
    config = setup(args)

    consumer = SimpleConsumer(config, args.group, {args.topic: FilterExpression()}, await_duration=LONG_POLL)
    try:
        consumer.startup()
    except Exception as e:
        fail(f"SimpleConsumer startup failed: {e!r}")
    log(f"SimpleConsumer {args.group} started on {args.topic}")

    either_handle_acks(consumer, config, args.topic)
    redelivered_after_change(consumer, config, args.topic)

    consumer.shutdown()
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
