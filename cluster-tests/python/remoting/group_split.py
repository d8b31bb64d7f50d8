"""Two PushConsumers of one group (PyPI `rocketmq` 0.4.4), each given another node's name server
address, so each heartbeats to its own node: the group's members are the union over the nodes,
so they share the topic's queues out between them and each message goes to one of them.

Exit 0 on success, 1 on a failed check, 2 on the overall timeout.
"""

import argparse
import threading
import time

from common import fail, finish, log, start_watchdog, text
from rocketmq.client import Message, Producer, PushConsumer, SendStatus


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv-a", required=True)
    p.add_argument("--namesrv-b", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--count", type=int, default=40)
    args = p.parse_args()
    start_watchdog(100)
    got = {"A": [], "B": []}
    lock = threading.Lock()

    def listener(name):
        def on_message(msg):
            with lock:
                got[name].append(text(msg.id))
        return on_message

    consumers = []
    for name, namesrv in [("A", args.namesrv_a), ("B", args.namesrv_b)]:
        c = PushConsumer(args.group)
        c.set_instance_name(name)
        c.set_namesrv_addr(namesrv)
        c.subscribe(args.topic, listener(name))
        c.start()
        consumers.append(c)
    # Two rebalance rounds (every 10-20 s): each has seen the other by then.
    time.sleep(25)
    producer = Producer("PID_SPLIT")
    producer.set_namesrv_addr(args.namesrv_a)
    producer.start()
    sent = set()
    for i in range(args.count):
        m = Message(args.topic)
        m.set_body(f"split-{i}")
        r = producer.send_sync(m)
        if r.status != SendStatus.OK:
            fail(f"send {i} answered {r.status}")
        sent.add(r.msg_id)
    producer.shutdown()
    deadline = time.time() + 40
    while time.time() < deadline:
        with lock:
            if sent <= set(got["A"]) | set(got["B"]):
                break
        time.sleep(0.2)
    time.sleep(1)
    for c in consumers:
        c.shutdown()
    with lock:
        a, b = set(got["A"]) & sent, set(got["B"]) & sent
    if sent - (a | b):
        fail(f"{len(sent - (a | b))} messages reached neither consumer")
    if a & b:
        fail(f"{len(a & b)} messages reached both consumers: the group was split")
    if not a or not b:
        fail(f"one consumer got everything (A {len(a)}, B {len(b)}): the queues were not shared")
    log(f"consumer A got {len(a)}, consumer B {len(b)}, none twice")
    print(f"RESULT A={len(a)} B={len(b)}", flush=True)
    finish(0)


if __name__ == "__main__":
    main()
