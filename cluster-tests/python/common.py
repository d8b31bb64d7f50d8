"""Helpers shared by the Python-client cluster tests (rocketmq-python-client, see requirements.txt).

Each script is one scenario run against a live RockRaft cluster: exit 0 on success, 1 on a
failed check, 2 on the overall timeout. Progress goes to stderr, one line per step. The client
itself logs to ~/logs/rocketmq_python/rocketmq_client.log; --verbose copies that to stderr.
"""

import logging
import os
import sys
import threading
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer

CLIENT_LOG = os.path.expanduser("~/logs/rocketmq_python/rocketmq_client.log")
_NAME = os.path.basename(sys.argv[0])


def log(msg):
    print(f"[{_NAME} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def finish(code):
    # os._exit: the client's thread pools are joined at interpreter exit and may block on
    # a misbehaving broker; the verdict is already decided here.
    sys.stderr.flush()
    os._exit(code)


def fail(msg):
    log(f"FAIL: {msg} (client log: {CLIENT_LOG})")
    finish(1)


def start_watchdog(seconds):
    def expire():
        log(f"FAIL: timed out after {seconds} s (client log: {CLIENT_LOG})")
        finish(2)

    t = threading.Timer(seconds, expire)
    t.daemon = True
    t.start()


def add_common_args(parser):
    parser.add_argument("--endpoints", required=True,
                        help='access point, "HOST:PORT" or "HOST:PORT;HOST:PORT"')
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--verbose", action="store_true", help="copy the client's own log to stderr")


def setup(args):
    if args.verbose:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("    client %(levelname)s %(message)s"))
        logging.getLogger("rocketmq-python-client").addHandler(h)
    return ClientConfiguration(args.endpoints, Credentials())


def produce_one(config, topic, body, tag="rockraft"):
    """Sends one message and returns its message id (from the send receipt)."""
    producer = Producer(config, (topic,))
    producer.startup()
    try:
        msg = Message()
        msg.topic = topic
        msg.body = body
        msg.tag = tag
        msg.keys = body.decode()
        receipt = producer.send(msg)
        log(f"produced {body.decode()} as {receipt.message_id}")
        return receipt.message_id
    except Exception as e:
        fail(f"send to {topic} failed: {e!r}")
    finally:
        producer.shutdown()


def receive_until(consumer, body, seconds, invisible):
    """Receives (invisible for `invisible` s) until the message with `body` shows up; None if it
    does not within `seconds`. Other messages are left alone. Receive errors are retried, since
    each receive polls just one queue and a cluster may be mid-election."""
    deadline = time.monotonic() + seconds
    last_error = None
    while time.monotonic() < deadline:
        try:
            msgs = consumer.receive(16, invisible)
        except Exception as e:  # status errors and gRPC transport errors alike
            last_error = e
            log(f"receive error (retrying): {e!r}")
            time.sleep(0.5)
            continue
        for m in msgs:
            if m.body == body:
                return m
            log(f"ignoring unrelated message {m.message_id}")
    if last_error is not None:
        log(f"last receive error: {last_error}")
    return None
