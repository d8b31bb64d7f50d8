#!/usr/bin/env python3
"""Lite topics (RocketMQ 5.5) through the official Python Producer, LiteSimpleConsumer and
LitePushConsumer.

1. A producer sends to lite topics chat-a, chat-b and chat-c of the lite parent topic,
   interleaved; a lite topic name that breaks the rule is refused (ILLEGAL_LITE_TOPIC), and so is
   a lite message to a normal topic. One message goes to lite topic tmp-1 of the short-lived
   parent (--ttl-topic), for the test to watch it expire.
2. A LiteSimpleConsumer subscribes to chat-a and chat-b: it receives exactly their messages, each
   lite topic in the order sent, each delivery naming its lite topic; chat-c never arrives.
3. After it unsubscribes from chat-b, new chat-a messages arrive and new chat-b messages do not.
4. The group's quota (3) bounds its subscriptions.
5. Exclusive group: a second client subscribing to a lite topic takes it over; the first gets
   nothing more of it.
6. A LitePushConsumer receives a lite topic's messages in order through its listener.
7. With --kill-pid: the leader is SIGKILLed while a LiteSimpleConsumer drains a lite topic; every
   acknowledged send still arrives, in order of first delivery.

Exit 0 on success, 1 on a failed check, 2 on timeout.
"""

import argparse
import os
import signal
import threading
import time
import uuid

from common import fail, finish, log, setup, start_watchdog
from rocketmq import (
    ConsumeResult,
    LitePushConsumer,
    LiteSimpleConsumer,
    Message,
    MessageListener,
    Producer,
)

LONG_POLL = 2  # seconds per ReceiveMessage
INVISIBLE = 30
RUN = uuid.uuid4().hex[:6]


class Sender:
    def __init__(self, config, topics):
        self.producer = Producer(config, tuple(topics))
        self.producer.startup()

    def send(self, topic, lite, body):
        msg = Message()
        msg.topic = topic
        msg.body = body.encode()
        msg.lite_topic = lite
        self.producer.send(msg)
        return body

    def refused(self, topic, lite, what):
        try:
            self.send(topic, lite, f"refused-{RUN}")
        except Exception as e:
            log(f"{what} refused as expected: {type(e).__name__}")
            return
        fail(f"{what} was accepted")

    def shutdown(self):
        self.producer.shutdown()


def subscribe(consumer, lite):
    """subscribe_lite, retried while the client has not had the server's quota yet (it arrives
    with the settings, after startup)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            consumer.subscribe_lite(lite)
            log(f"subscribed to {lite}")
            return
        except Exception as e:
            if time.monotonic() > deadline:
                fail(f"subscribe_lite({lite}) kept failing: {e!r}")
            time.sleep(0.3)


def drain(consumer, want, seconds, ack=True):
    """Receives (and acks) until `want` messages arrived or `seconds` passed: [(lite, body)]."""
    got = []
    deadline = time.monotonic() + seconds
    while len(got) < want and time.monotonic() < deadline:
        try:
            msgs = consumer.receive(16, INVISIBLE)
        except Exception as e:
            log(f"receive error (retrying): {e!r}")
            time.sleep(0.5)
            continue
        for m in msgs:
            got.append((m.lite_topic, m.body.decode()))
            if ack:
                try:
                    consumer.ack(m)
                except Exception as e:
                    log(f"ack of {m.body.decode()} failed: {e!r}")
    return got


def in_order(got, sent):
    """Each lite topic's bodies arrive in the order sent (first deliveries)."""
    for lite, bodies in sent.items():
        seen = []
        for l, b in got:
            if l == lite and b not in seen:
                seen.append(b)
        expected = [b for b in bodies if b in seen]
        if seen != expected:
            fail(f"{lite} arrived as {seen}, sent as {bodies}")


def simple_phases(config, args, sender):
    sent = {"chat-a": [], "chat-b": [], "chat-c": []}
    for i in range(5):
        for lite in ("chat-a", "chat-b") + (("chat-c",) if i < 3 else ()):
            sent[lite].append(sender.send(args.topic, lite, f"{lite}-{i}-{RUN}"))
    sender.refused(args.topic, "bad name!", "an illegal lite topic name")
    sender.refused(args.plain_topic, "chat-a", "a lite message to a normal topic")
    sender.send(args.ttl_topic, "tmp-1", f"tmp-{RUN}")
    log(f"sent {sum(len(v) for v in sent.values())} messages to 3 lite topics")

    consumer = LiteSimpleConsumer(args.topic, config, args.group, await_duration=LONG_POLL)
    consumer.startup()
    try:
        subscribe(consumer, "chat-a")
        subscribe(consumer, "chat-b")
        got = drain(consumer, 10, 30)
        lites = {l for l, _ in got}
        if lites != {"chat-a", "chat-b"}:
            fail(f"received lite topics {sorted(lites)}, subscribed to chat-a and chat-b")
        bodies = {b for _, b in got}
        want = set(sent["chat-a"] + sent["chat-b"])
        if bodies != want:
            fail(f"missing {sorted(want - bodies)}")
        in_order(got, sent)
        log("2: only subscribed lite topics, each in order")

        consumer.unsubscribe_lite("chat-b")
        more_a = [sender.send(args.topic, "chat-a", f"chat-a-{i}-{RUN}") for i in (5, 6)]
        more_b = [sender.send(args.topic, "chat-b", f"chat-b-{i}-{RUN}") for i in (5, 6)]
        got = drain(consumer, 2, 20)
        got += drain(consumer, 1, 3)  # anything else would come now
        if sorted(b for _, b in got) != sorted(more_a):
            fail(f"after unsubscribing chat-b received {got}, expected {more_a} (not {more_b})")
        log("3: an unsubscribed lite topic is not delivered")

        subscribe(consumer, "chat-b")
        subscribe(consumer, "chat-c")
        try:
            consumer.subscribe_lite("chat-d")
            fail("a fourth lite topic was accepted with a quota of 3")
        except Exception as e:
            log(f"4: quota enforced: {type(e).__name__}")
    finally:
        consumer.shutdown()


def exclusive_phase(config, args, sender):
    first = LiteSimpleConsumer(args.topic, config, args.exclusive_group, await_duration=LONG_POLL)
    second = LiteSimpleConsumer(args.topic, config, args.exclusive_group, await_duration=LONG_POLL)
    first.startup()
    second.startup()
    try:
        subscribe(first, "ex-1")
        subscribe(second, "ex-1")
        bodies = [sender.send(args.topic, "ex-1", f"ex-1-{i}-{RUN}") for i in range(3)]
        got = drain(second, 3, 20)
        if [b for _, b in got] != bodies:
            fail(f"the newest subscriber received {got}, expected {bodies} in order")
        stolen = drain(first, 1, 3)
        if stolen:
            fail(f"the subscriber taken over still received {stolen}")
        log("5: the newest subscriber of an exclusive group took the lite topic over")
    finally:
        first.shutdown()
        second.shutdown()


class Collect(MessageListener):
    def __init__(self):
        self.got = []
        self.lock = threading.Lock()

    def consume(self, message):
        with self.lock:
            self.got.append((message.lite_topic, message.body.decode()))
        return ConsumeResult.SUCCESS


def push_phase(config, args, sender):
    listener = Collect()
    consumer = LitePushConsumer(config, args.push_group, args.topic, listener)
    consumer.startup()
    try:
        subscribe(consumer, "push-1")
        bodies = [sender.send(args.topic, "push-1", f"push-1-{i}-{RUN}") for i in range(5)]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with listener.lock:
                if len({b for _, b in listener.got}) >= len(bodies):
                    break
            time.sleep(0.2)
        with listener.lock:
            got = list(listener.got)
        firsts = []
        for l, b in got:
            if l != "push-1":
                fail(f"the push consumer got lite topic {l}")
            if b not in firsts:
                firsts.append(b)
        if firsts != bodies:
            fail(f"the push consumer got {firsts}, expected {bodies} in order")
        log("6: the push consumer received its lite topic in order")
    finally:
        consumer.shutdown()


def kill_phase(config, args, sender):
    consumer = LiteSimpleConsumer(args.topic, config, args.kill_group, await_duration=LONG_POLL)
    consumer.startup()
    try:
        subscribe(consumer, "kill-1")
        acked = []

        def send(i):
            try:
                acked.append(sender.send(args.topic, "kill-1", f"kill-1-{i:03d}-{RUN}"))
            except Exception as e:
                log(f"send {i} failed (not acknowledged): {e!r}")

        for i in range(20):
            send(i)
        got = drain(consumer, 10, 20)
        os.kill(args.kill_pid, signal.SIGKILL)
        log(f"killed the leader (pid {args.kill_pid}) after {len(got)} receives")
        for i in range(20, 40):
            send(i)
        deadline = time.monotonic() + 60
        while not set(acked) <= {b for _, b in got} and time.monotonic() < deadline:
            got += drain(consumer, len(acked), 5)
        missing = set(acked) - {b for _, b in got}
        if missing:
            fail(f"{len(missing)} acknowledged messages never arrived after the kill: {sorted(missing)[:5]}")
        in_order(got, {"kill-1": acked})
        log(f"7: all {len(acked)} acknowledged sends arrived in order across the leader's death "
            f"({len(got) - len(set(b for _, b in got))} redelivered)")
    finally:
        consumer.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--topic", required=True, help="a lite parent topic")
    parser.add_argument("--ttl-topic", required=True, help="a lite parent topic with a short TTL")
    parser.add_argument("--plain-topic", required=True, help="a normal topic")
    parser.add_argument("--group", required=True, help="a shared lite group of --topic, quota 3")
    parser.add_argument("--exclusive-group", required=True, help="an exclusive lite group of --topic")
    parser.add_argument("--push-group", required=True, help="a shared lite group of --topic")
    parser.add_argument("--kill-group", help="a shared lite group of --topic (with --kill-pid)")
    parser.add_argument("--kill-pid", type=int, help="the leader's pid, killed in phase 7")
    parser.add_argument("--verbose", action="store_true", help="copy the client's own log to stderr")
    args = parser.parse_args()
    start_watchdog(240)
    config = setup(args)
    sender = Sender(config, [args.topic, args.ttl_topic, args.plain_topic])
    try:
        simple_phases(config, args, sender)
        exclusive_phase(config, args, sender)
        push_phase(config, args, sender)
        if args.kill_pid:
            kill_phase(config, args, sender)
    except SystemExit:
        raise
    except Exception as e:
        fail(f"unexpected error: {e!r}")
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
