#!/usr/bin/env python3
"""Delayed messages with RecallMessage, and transactional messages with a checker, through the
official Python Producer (rocketmq-python-client 5.1.2 has recall_message).

Delay (--delay-topic, a DELAY topic; the broker's default max_delay_secs of 30 days):
- two sends due in DELAY s each get a non-empty recall handle;
- recalling the first answers its message id; recalling it again is MESSAGE_NOT_FOUND; a
  malformed handle is BAD_REQUEST;
- a send due in the past is delivered at once; one due 40 days ahead is refused with
  ILLEGAL_DELIVERY_TIME;
- the second arrives exactly once and not before its time; the recalled one never arrives;
- recalling the second after it fired is MESSAGE_NOT_FOUND.

Transactions (--tx-topic, a TRANSACTION topic; the broker must check open halves after 1 s and
then every 2 s: transaction_recovery_secs = 1, transaction_check_interval_secs = 2):
- every half gets a transaction id;
- a committed half arrives once; committing it again is OK, rolling it back then is
  PRECONDITION_FAILED; likewise a rolled-back half (never delivered) refuses a later commit;
- EndTransaction naming another transaction's id is INVALID_TRANSACTION_ID and settles nothing;
- two halves left open are settled by the producer's TransactionChecker (COMMIT for one,
  ROLLBACK for the other), each asked about exactly once; the committed one arrives once, the
  rolled-back one never; halves the producer settled itself are never asked about.

Delivery times go on the wire in whole seconds (the client puts delivery_timestamp into
Timestamp.seconds as given), so they are set as epoch seconds here.

Both topics and the group must exist. Exit 0 on success, 1 on a failed check, 2 on timeout (90 s).
"""

import argparse
import threading
import time
import uuid

from common import fail, finish, log, setup, start_watchdog
from rocketmq import (FilterExpression, Message, Producer, SimpleConsumer, TransactionChecker,
                      TransactionResolution)
from rocketmq.grpc_protocol import TransactionSource

OK = 20000
BAD_REQUEST = 40000
INVALID_TRANSACTION_ID = 40008
ILLEGAL_DELIVERY_TIME = 40012
MESSAGE_NOT_FOUND = 40401
PRECONDITION_FAILED = 42800

DELAY = 4  # seconds ahead for the delayed sends
LATE = 5  # seconds a delayed message may be late (the broker aims at ~1 s; a long poll adds more)
LONG_POLL = 3  # seconds per ReceiveMessage
INVISIBLE = 60  # seconds; longer than the scenario, so a lost ack never looks like a redelivery
RUN = uuid.uuid4().hex[:8]  # keeps bodies unique if the topics are reused


def body(label):
    return f"{label}-{RUN}".encode()


def message(topic, label, delivery_timestamp=None):
    msg = Message()
    msg.topic = topic
    msg.body = body(label)
    msg.tag = "rockraft"
    msg.keys = label
    if delivery_timestamp is not None:
        msg.delivery_timestamp = delivery_timestamp
    return msg


def code_of(e):
    return getattr(e, "code", None)


def collect(consumer, expect, quiet, seconds):
    """Receives (and acks) until every body in `expect` has arrived and `quiet` s more have
    passed, or `seconds` have passed. Returns (body, message_id, wall-clock ms) of every
    delivery. Receive errors are retried (each receive polls one queue)."""
    deadline = time.monotonic() + seconds
    got = []
    complete_since = None
    while time.monotonic() < deadline:
        if all(any(b == g[0] for g in got) for b in expect):
            complete_since = complete_since or time.monotonic()
            if time.monotonic() - complete_since >= quiet:
                break
        try:
            msgs = consumer.receive(16, INVISIBLE)
        except Exception as e:
            log(f"receive error (retrying): {e!r}")
            time.sleep(0.5)
            continue
        at_ms = int(time.time() * 1000)
        for m in msgs:
            log(f"received {m.body.decode(errors='replace')} ({m.message_id})")
            got.append((m.body, m.message_id, at_ms))
            try:
                consumer.ack(m)
            except Exception as e:
                log(f"ack of {m.message_id} failed: {e!r}")
    return got


def deliveries(got, b):
    return [g for g in got if g[0] == b]


def exactly_once(got, label):
    d = deliveries(got, body(label))
    if len(d) != 1:
        fail(f"{label} was delivered {len(d)} times, expected once")
    return d[0]


def never(got, label):
    d = deliveries(got, body(label))
    if d:
        fail(f"{label} must never be delivered, but was ({d[0][1]})")


def recall_raw(producer, topic, handle):
    """RecallMessage's (status code, message id). The public recall_message() lets
    MESSAGE_NOT_FOUND pass as if it succeeded (its MessagingResultChecker returns on that code),
    so the status is read from the response of the client's own request path."""
    raw = getattr(producer, "_Producer__recall_message", None)
    if raw is None:
        fail("this client version has no Producer.__recall_message: update recall_raw")
    res = raw(topic, handle).result()
    return res.status.code, res.message_id


def expect_recall_not_found(producer, topic, handle, what):
    code, _ = recall_raw(producer, topic, handle)
    if code != MESSAGE_NOT_FOUND:
        fail(f"{what}: RecallMessage answered {code}, expected MESSAGE_NOT_FOUND ({MESSAGE_NOT_FOUND})")
    # What an application sees from the public call (no exception, in 5.1.2).
    try:
        outcome = f"returned {producer.recall_message(topic, handle)!r}"
    except Exception as e:
        outcome = f"raised {e!r}"
    log(f"{what}: MESSAGE_NOT_FOUND (recall_message {outcome})")


def delay_and_recall(config, topic, group):
    producer = Producer(config, (topic,))
    producer.startup()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=LONG_POLL)
    consumer.startup()

    due = int(time.time()) + DELAY
    recalled = producer.send(message(topic, "recalled", due))
    kept = producer.send(message(topic, "kept", due))
    for label, r in (("recalled", recalled), ("kept", kept)):
        if not r.recall_handle:
            fail(f"the pending delayed send {label} ({r.message_id}) came back without a recall handle")
    log(f"sent two messages due at {due}; recall handles {recalled.recall_handle!r}, {kept.recall_handle!r}")

    # Right away, well before the delivery time.
    try:
        returned = producer.recall_message(topic, recalled.recall_handle)
    except Exception as e:
        fail(f"recalling a pending delayed message failed: {e!r}")
    if returned != recalled.message_id:
        fail(f"recall answered message id {returned!r}, expected {recalled.message_id}")
    log(f"recalled {returned}")
    expect_recall_not_found(producer, topic, recalled.recall_handle, "recalling it again")

    try:
        producer.recall_message(topic, "!!not-a-recall-handle!!")
    except Exception as e:
        if code_of(e) != BAD_REQUEST:
            fail(f"a malformed recall handle failed with {e!r}, expected BAD_REQUEST ({BAD_REQUEST})")
        log("a malformed recall handle is BAD_REQUEST")
    else:
        fail("recalling with a malformed handle succeeded")

    sent_ms = int(time.time() * 1000)
    past = producer.send(message(topic, "past", int(time.time()) - 30))
    log(f"sent one due 30 s ago as {past.message_id}")

    try:
        producer.send(message(topic, "too-far", int(time.time()) + 40 * 24 * 3600))
    except Exception as e:
        if code_of(e) != ILLEGAL_DELIVERY_TIME:
            fail(f"a send due in 40 days failed with {e!r}, expected ILLEGAL_DELIVERY_TIME ({ILLEGAL_DELIVERY_TIME})")
        log("a send due in 40 days was refused with ILLEGAL_DELIVERY_TIME")
    else:
        fail("a send due in 40 days (more than max_delay_secs) was accepted")

    got = collect(consumer, [body("kept"), body("past")], 3, DELAY + LATE + 10)
    _, kept_id, kept_at = exactly_once(got, "kept")
    _, past_id, past_at = exactly_once(got, "past")
    never(got, "recalled")
    never(got, "too-far")
    if (kept_id, past_id) != (kept.message_id, past.message_id):
        fail(f"delivered ids {kept_id}, {past_id} differ from the send receipts' {kept.message_id}, {past.message_id}")
    if kept_at < due * 1000:
        fail(f"the delayed message arrived {due * 1000 - kept_at} ms before its delivery time")
    if kept_at > (due + LATE) * 1000:
        fail(f"the delayed message arrived {kept_at - due * 1000} ms after its delivery time")
    if past_at > sent_ms + LATE * 1000:
        fail(f"a message due in the past arrived only {past_at - sent_ms} ms after it was sent")
    log(f"kept arrived {kept_at - due * 1000} ms after its time, past {past_at - sent_ms} ms after its send")

    expect_recall_not_found(producer, topic, kept.recall_handle, "recalling after it fired")
    consumer.shutdown()
    producer.shutdown()


class Checker(TransactionChecker):
    """Records every question; COMMIT for bodies with "commit", ROLLBACK for "rollback"."""

    def __init__(self):
        self.lock = threading.Lock()
        self.asked = []  # (message id, body)

    def check(self, message):
        b = message.body.decode(errors="replace")
        log(f"checker asked about {message.message_id} ({b})")
        with self.lock:
            self.asked.append((message.message_id, message.body))
        return TransactionResolution.ROLLBACK if "rollback" in b else TransactionResolution.COMMIT

    def times_asked(self, message_id):
        with self.lock:
            return sum(1 for m, _ in self.asked if m == message_id)


def half(producer, topic, label):
    tx = producer.begin_transaction()
    msg = message(topic, label)
    receipt = producer.send(msg, tx)
    if not receipt.transaction_id:
        fail(f"half {label} ({receipt.message_id}) was acknowledged without a transaction id")
    log(f"half {label} is {receipt.message_id}, transaction {receipt.transaction_id}")
    return tx, msg, receipt


def expect_refused(action, code, what):
    try:
        action()
    except Exception as e:
        if code_of(e) != code:
            fail(f"{what} failed with {e!r}, expected {code}")
        log(f"{what}: refused with {code}")
    else:
        fail(f"{what} was accepted, expected {code}")


def transactions(config, topic, group):
    checker = Checker()
    producer = Producer(config, (topic,), checker)
    producer.startup()
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=LONG_POLL)
    consumer.startup()

    tx, _, committed = half(producer, topic, "commit-me")
    tx.commit()
    tx.commit()  # the same resolution again is fine
    expect_refused(tx.rollback, PRECONDITION_FAILED, "rolling back a committed half")

    tx, _, rolled_back = half(producer, topic, "rollback-me")
    tx.rollback()
    tx.rollback()
    expect_refused(tx.commit, PRECONDITION_FAILED, "committing a rolled-back half")

    _, msg, recover_commit = half(producer, topic, "recover-commit")
    _, _, recover_rollback = half(producer, topic, "recover-rollback")
    # Another transaction's id for this half: refused, and the half stays open.
    res = producer.end_transaction(recover_commit.message_queue.endpoints, msg, committed.transaction_id,
                                   TransactionResolution.COMMIT, TransactionSource.SOURCE_CLIENT)
    if res.status.code != INVALID_TRANSACTION_ID:
        fail(f"EndTransaction with another transaction's id answered {res.status.code}, "
             f"expected INVALID_TRANSACTION_ID ({INVALID_TRANSACTION_ID})")
    log("EndTransaction with another transaction's id: INVALID_TRANSACTION_ID")

    # The open halves are checked after 1 s; quiet for two more check intervals after that.
    got = collect(consumer, [body("commit-me"), body("recover-commit")], 5, 40)
    if exactly_once(got, "commit-me")[1] != committed.message_id:
        fail("the committed message was delivered under another message id")
    if exactly_once(got, "recover-commit")[1] != recover_commit.message_id:
        fail("the recovered message was delivered under another message id")
    never(got, "rollback-me")
    never(got, "recover-rollback")
    for label, r in (("recover-commit", recover_commit), ("recover-rollback", recover_rollback)):
        n = checker.times_asked(r.message_id)
        if n != 1:
            fail(f"the checker was asked about {label} {n} times, expected exactly once")
    for label, r in (("commit-me", committed), ("rollback-me", rolled_back)):
        if checker.times_asked(r.message_id):
            fail(f"the checker was asked about {label}, which the producer had resolved")
    log("committed and recovered halves arrived once; rolled-back ones never; each open half asked once")
    consumer.shutdown()
    producer.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", required=True, help='access point, "HOST:PORT"')
    parser.add_argument("--delay-topic", required=True)
    parser.add_argument("--tx-topic", required=True)
    parser.add_argument("--group", required=True, help="consumer group used on both topics")
    parser.add_argument("--verbose", action="store_true", help="copy the client's own log to stderr")
    args = parser.parse_args()
    start_watchdog(90)
    config = setup(args)
    try:
        delay_and_recall(config, args.delay_topic, args.group)
        transactions(config, args.tx_topic, args.group)
    except SystemExit:
        raise
    except Exception as e:
        fail(f"unexpected error: {e!r}")
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
