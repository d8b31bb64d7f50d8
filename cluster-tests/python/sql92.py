#!/usr/bin/env python3
"""SQL92 subscriptions through the official Python SimpleConsumer.

- A producer sends messages with user properties (amount, region, and for some vip); a
  SimpleConsumer of --group subscribes with FilterExpression(EXPRESSION, FilterType.SQL) and
  receives exactly the messages the expression selects, each once (three-valued logic, and
  RocketMQ's typing of string properties against number literals).
- A SimpleConsumer of --bad-group subscribing with an expression that does not parse is refused
  at receive with ILLEGAL_FILTER_EXPRESSION (40010).

The topic and both groups must exist. Exit 0 on success, 1 on a failed check, 2 on timeout (60 s).
"""

import argparse
import time
import uuid

from common import fail, finish, log, setup, start_watchdog
from rocketmq import FilterExpression, Message, Producer, SimpleConsumer
from rocketmq.grpc_protocol import Code, FilterType

ILLEGAL_FILTER_EXPRESSION = Code.ILLEGAL_FILTER_EXPRESSION  # 40010

EXPRESSION = "region IN ('eu', 'uk') AND (amount > 100 OR vip IS NOT NULL)"
BAD_EXPRESSION = "region IN ('eu', 'uk') AND amount >"
LONG_POLL = 3  # seconds per ReceiveMessage
INVISIBLE = 60  # seconds; longer than the scenario, so a lost ack never looks like a redelivery
RUN = uuid.uuid4().hex[:8]  # keeps bodies unique if the topic is reused

# (label, properties, selected by EXPRESSION)
MESSAGES = [
    ("eu-big", {"region": "eu", "amount": "250"}, True),
    ("uk-vip", {"region": "uk", "amount": "5", "vip": "gold"}, True),
    ("uk-just-over", {"region": "uk", "amount": "101"}, True),
    # amount > 100 is NULL without amount; NULL OR TRUE is TRUE.
    ("eu-vip-no-amount", {"region": "eu", "vip": "silver"}, True),
    # As in RocketMQ: a property that does not parse as the literal's type (an integer here) is
    # an evaluation error, and the message is not delivered.
    ("eu-decimal", {"region": "eu", "amount": "100.5"}, False),
    ("eu-small", {"region": "eu", "amount": "100"}, False),
    ("us-big", {"region": "us", "amount": "900"}, False),
    ("us-vip", {"region": "us", "amount": "900", "vip": "gold"}, False),
    ("no-region", {"amount": "900"}, False),
    ("eu-no-amount", {"region": "eu"}, False),
    ("EU-big", {"region": "EU", "amount": "250"}, False),
    ("eu-text-amount", {"region": "eu", "amount": "lots"}, False),
]


def body(label):
    return f"{label}-{RUN}".encode()


def code_of(e):
    return getattr(e, "code", None)


def send_all(config, topic):
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        for label, props, _ in MESSAGES:
            msg = Message()
            msg.topic = topic
            msg.body = body(label)
            msg.keys = label
            for k, v in props.items():
                msg.add_property(k, v)
            receipt = producer.send(msg)
            log(f"sent {label} {props} as {receipt.message_id}")
    except Exception as e:
        fail(f"send failed: {e!r}")
    finally:
        producer.shutdown()


def collect(consumer, expect, seconds):
    """Receives (and acks) until every body in `expect` has arrived and one more receive came
    back empty, or `seconds` have passed. Returns every body delivered. Receive errors are
    retried (each receive names one queue; a cluster may be mid-election)."""
    deadline = time.monotonic() + seconds
    got = []
    while time.monotonic() < deadline:
        complete = all(b in got for b in expect)
        try:
            msgs = consumer.receive(32, INVISIBLE)
        except Exception as e:
            if code_of(e) == ILLEGAL_FILTER_EXPRESSION:
                fail(f"the valid expression {EXPRESSION!r} was refused: {e!r}")
            log(f"receive error (retrying): {e!r}")
            time.sleep(0.5)
            continue
        if not msgs and complete:
            break
        for m in msgs:
            log(f"received {m.body.decode(errors='replace')} ({m.message_id}) properties {m.properties}")
            got.append(m.body)
            try:
                consumer.ack(m)
            except Exception as e:
                log(f"ack of {m.message_id} failed: {e!r}")
    return got


def filtered(config, topic, group):
    consumer = SimpleConsumer(config, group, {topic: FilterExpression(EXPRESSION, FilterType.SQL)},
                              await_duration=LONG_POLL)
    consumer.startup()
    expect = [body(label) for label, _, selected in MESSAGES if selected]
    got = collect(consumer, expect, 40)
    for label, _, selected in MESSAGES:
        n = got.count(body(label))
        if n != (1 if selected else 0):
            fail(f"{label} was delivered {n} times, expected {'once' if selected else 'never'} "
                 f"for {EXPRESSION!r}")
    log(f"exactly the {len(expect)} messages the expression selects arrived, once each")
    consumer.shutdown()


def refused(config, topic, group):
    consumer = SimpleConsumer(config, group, {topic: FilterExpression(BAD_EXPRESSION, FilterType.SQL)},
                              await_duration=LONG_POLL)
    consumer.startup()
    deadline = time.monotonic() + 20
    while True:
        try:
            msgs = consumer.receive(32, INVISIBLE)
        except Exception as e:
            if code_of(e) == ILLEGAL_FILTER_EXPRESSION:
                log(f"the invalid expression was refused with ILLEGAL_FILTER_EXPRESSION: {e}")
                break
            if time.monotonic() > deadline:
                fail(f"the invalid expression failed with {e!r} (code {code_of(e)}), expected "
                     f"ILLEGAL_FILTER_EXPRESSION ({ILLEGAL_FILTER_EXPRESSION})")
            log(f"receive error (retrying): {e!r} (code {code_of(e)})")
            time.sleep(0.5)
            continue
        fail(f"receiving with the invalid expression {BAD_EXPRESSION!r} succeeded ({len(msgs)} messages)")
    consumer.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--endpoints", required=True, help='access point, "HOST:PORT"')
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True, help="the group subscribing with a valid expression")
    parser.add_argument("--bad-group", required=True, help="the group subscribing with an invalid one")
    parser.add_argument("--verbose", action="store_true", help="copy the client's own log to stderr")
    args = parser.parse_args()
    start_watchdog(60)
    config = setup(args)
    try:
        send_all(config, args.topic)
        filtered(config, args.topic, args.group)
        refused(config, args.topic, args.bad_group)
    except SystemExit:
        raise
    except Exception as e:
        fail(f"unexpected error: {e!r}")
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
