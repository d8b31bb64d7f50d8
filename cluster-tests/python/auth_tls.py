#!/usr/bin/env python3
"""The official Python client against a cluster with authentication and TLS on.

With the right access key and secret, over TLS verified against the test CA: a producer sends a
message and a SimpleConsumer receives and acks it. With a wrong secret the producer's send is
refused, and with no credentials at all the consumer's receive is refused.

The topic and the group must exist and the user must be allowed Pub and Sub on the topic and Sub
on the group. Exit 0 on success, 1 on a failed check, 2 on timeout (90 s).
"""

import argparse
import os
import uuid

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--endpoints", required=True)
parser.add_argument("--topic", required=True)
parser.add_argument("--group", required=True)
parser.add_argument("--access-key", required=True)
parser.add_argument("--secret-key", required=True)
parser.add_argument("--ca", required=True, help="the CA certificate (PEM) the nodes' certificates are verified against")
args = parser.parse_args()
# gRPC reads its default trust roots from here: set before the client makes a channel.
os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = args.ca

from common import CLIENT_LOG, fail, finish, log, receive_until, start_watchdog  # noqa: E402
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer  # noqa: E402


def config(ak, sk):
    return ClientConfiguration(args.endpoints, Credentials(ak, sk), request_timeout=5)


def send(cfg, body):
    producer = Producer(cfg, (args.topic,), tls_enable=True)
    try:
        producer.startup()
        msg = Message()
        msg.topic = args.topic
        msg.body = body
        msg.tag = "tls"
        return producer.send(msg).message_id
    finally:
        producer.shutdown()


def log_size():
    try:
        return os.path.getsize(CLIENT_LOG)
    except OSError:
        return 0


def refused_as_unauthorized(since):
    """Whether the client logged a 40100 (UNAUTHORIZED) answer after byte `since` of its log:
    the client wraps the broker's status in its own exception text."""
    with open(CLIENT_LOG, errors="replace") as f:
        f.seek(since)
        return "40100" in f.read()


def main():
    start_watchdog(90)
    body = f"over-tls-{uuid.uuid4().hex}".encode()
    try:
        message_id = send(config(args.access_key, args.secret_key), body)
    except Exception as e:
        fail(f"a signed send over TLS failed: {e!r}")
    log(f"sent {message_id} signed, over TLS")

    consumer = SimpleConsumer(config(args.access_key, args.secret_key), args.group,
                              {args.topic: FilterExpression()}, await_duration=3, tls_enable=True)
    consumer.startup()
    msg = receive_until(consumer, body, 30, 15)
    if msg is None:
        fail("the message sent over TLS was not received within 30 s")
    consumer.ack(msg)
    log("received and acked it")
    consumer.shutdown()

    since = log_size()
    try:
        send(config(args.access_key, args.secret_key + "-wrong"), b"wrong secret")
    except Exception as e:
        log(f"a send with a wrong secret was refused: {e!r}")
        if not refused_as_unauthorized(since):
            fail(f"refused, but the client saw no UNAUTHORIZED (40100): {e!r}")
    else:
        fail("a send with a wrong secret succeeded")

    since = log_size()
    anonymous = SimpleConsumer(config("", ""), args.group, {args.topic: FilterExpression()},
                               await_duration=1, tls_enable=True)
    try:
        anonymous.startup()
        anonymous.receive(16, 15)
    except Exception as e:
        log(f"a receive without credentials was refused: {e!r}")
        if not refused_as_unauthorized(since):
            fail(f"refused, but the client saw no UNAUTHORIZED (40100): {e!r}")
    else:
        fail("a receive without credentials succeeded")
    log("PASS")
    finish(0)


if __name__ == "__main__":
    main()
