#!/usr/bin/env python3
"""Priority messages (RocketMQ 5.4) through the official Python Producer and SimpleConsumer.

- A producer sends, in rounds, one message of each priority 0-7 to an 8-queue priority topic
  (lowest first, so arrival order is the opposite of priority order), then a message of priority
  20 (above the highest queue: it shares queue 7) and messages without a priority.
- A SimpleConsumer of a group with the default priority factor (100) then receives in small
  batches: every priority message arrives once, with the priority it was sent with, and they
  arrive highest queue first (min(priority, 7) never goes up along the deliveries); the messages
  without a priority arrive too.

The topic (type priority, 8 queues) and the group must exist. Exit 0 on success, 1 on a failed
check, 2 on timeout (90 s).
"""

import argparse
import time
import uuid

from common import fail, finish, log, setup, start_watchdog
from rocketmq import FilterExpression, Message, Producer, SimpleConsumer

QUEUES = 8
ROUNDS = 4
BATCH = 4
LONG_POLL = 3  # seconds per ReceiveMessage
INVISIBLE = 60  # seconds; longer than the scenario, so a lost ack never looks like a redelivery
RUN = uuid.uuid4().hex[:8]  # keeps bodies unique if the topic is reused


def send_all(config, topic):
    """Sends the scenario's messages; returns {body: priority or None}."""
    sent = {}
    producer = Producer(config, (topic,))
    producer.startup()

    def send(body, priority):
        msg = Message()
        msg.topic = topic
        msg.body = body
        msg.tag = "prio"
        if priority is not None:
            msg.priority = priority
        receipt = producer.send(msg)
        sent[body] = priority
        log(f"sent {body.decode()} (priority {priority}) as {receipt.message_id}")

    try:
        for r in range(ROUNDS):
            for p in range(QUEUES):
                send(f"p{p}-r{r}-{RUN}".encode(), p)
        send(f"p20-{RUN}".encode(), 20)
        for n in range(3):
            send(f"plain-{n}-{RUN}".encode(), None)
    except Exception as e:
        fail(f"send failed: {e!r}")
    finally:
        producer.shutdown()
    return sent


def receive_all(config, topic, group, sent):
    """Receives (and acks) until every sent body has arrived; returns [(body, priority)] in the
    order delivered."""
    consumer = SimpleConsumer(config, group, {topic: FilterExpression()}, await_duration=LONG_POLL)
    consumer.startup()
    got = []
    deadline = time.monotonic() + 60
    try:
        while len({b for b, _ in got}) < len(sent) and time.monotonic() < deadline:
            try:
                msgs = consumer.receive(BATCH, INVISIBLE)
            except Exception as e:
                log(f"receive error (retrying): {e!r}")
                time.sleep(0.5)
                continue
            log(f"batch: {[(m.body.decode(), m.priority) for m in msgs]}")
            for m in msgs:
                got.append((m.body, m.priority))
                try:
                    consumer.ack(m)
                except Exception as e:
                    log(f"ack of {m.message_id} failed: {e!r}")
    finally:
        consumer.shutdown()
    return got


def check(sent, got):
    bodies = [b for b, _ in got]
    for body, priority in sent.items():
        n = bodies.count(body)
        if n != 1:
            fail(f"{body.decode()} (priority {priority}) arrived {n} times, expected once")
    for body, priority in got:
        expected = sent[body]
        if expected is not None and priority != expected:
            fail(f"{body.decode()} was sent with priority {expected} and delivered with {priority}")
    # Messages without a priority take the queues in turn; the others go highest queue first.
    queues = [min(sent[b], QUEUES - 1) for b, _ in got if sent[b] is not None]
    for i in range(1, len(queues)):
        if queues[i] > queues[i - 1]:
            fail(f"delivery {i} came from priority queue {queues[i]} after queue {queues[i - 1]}: "
                 f"order {queues}")
    log(f"all {len(sent)} messages arrived once; priority queues in delivery order: {queues}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", required=True, help='access point, "HOST:PORT"')
    parser.add_argument("--topic", required=True, help="a priority topic of 8 queues")
    parser.add_argument("--group", required=True)
    parser.add_argument("--verbose", action="store_true", help="copy the client's own log to stderr")
    args = parser.parse_args()
    start_watchdog(90)
    config = setup(args)
    try:
        sent = send_all(config, args.topic)
        # Every send is acknowledged (committed); give the node the consumer talks to a moment
        # to apply the last of them, so its first plan sees every queue.
        time.sleep(1)
        got = receive_all(config, args.topic, args.group, sent)
        check(sent, got)
    except SystemExit:
        raise
    except Exception as e:
        fail(f"unexpected error: {e!r}")
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
