"""The RocketMQ 4.x Remoting client (PyPI `rocketmq` 0.4.4, rocketmq-client-cpp 1.2.3 inside)
against a RockRaft node's Remoting listener, which is its name server and broker in one.

Sends --count messages with send_sync (tags TagA and TagB in turn, a key, a property) and
--oneway more with send_oneway; reads every queue with the PullConsumer and checks each
acknowledged message is there once, intact; then a clustering PushConsumer subscribed to TagA
alone must get exactly the TagA messages. Every message pulled is printed as
`PULLED <id> <tag> <body>` for the test to match what other protocols sent.

Exit 0 on success, 1 on a failed check, 2 on the overall timeout.
"""

import argparse
import threading
import time

from common import fail, finish, log, start_watchdog, text
from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, SendStatus


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True, help="the push consumer's group")
    p.add_argument("--pull-group", required=True)
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--oneway", type=int, default=5)
    p.add_argument("--timeout", type=int, default=90)
    args = p.parse_args()
    start_watchdog(args.timeout)

    producer = Producer("PID_REMOTING_TEST")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    sent = {}
    for i in range(args.count):
        tag = "TagA" if i % 2 == 0 else "TagB"
        m = Message(args.topic)
        m.set_tags(tag)
        m.set_keys(f"key-{i}")
        m.set_property("seq", str(i))
        m.set_body(f"remoting-{i}")
        r = producer.send_sync(m)
        if r.status != SendStatus.OK:
            fail(f"send {i} answered {r.status}")
        sent[r.msg_id] = (tag, f"remoting-{i}")
    log(f"{len(sent)} sent with send_sync, each acknowledged")
    for i in range(args.oneway):
        m = Message(args.topic)
        m.set_tags("TagB")
        m.set_body(f"oneway-{i}")
        producer.send_oneway(m)
    log(f"{args.oneway} sent with send_oneway")
    producer.shutdown()

    # Oneway sends are not acknowledged: pull until they are there too (or time runs out).
    expected = len(sent) + args.oneway
    pulled = {}
    deadline = time.time() + 30
    while time.time() < deadline:
        pulled = {}
        consumer = PullConsumer(args.pull_group)
        consumer.set_namesrv_addr(args.namesrv)
        consumer.start()
        PullConsumer.offset_table = {}
        for msg in consumer.pull(args.topic):
            mid = text(msg.id)
            if mid in pulled:
                fail(f"message {mid} pulled twice")
            pulled[mid] = (text(msg.tags), text(msg.body), text(msg.keys), text(msg.get_property("seq")))
        consumer.shutdown()
        if sum(1 for v in pulled.values() if v[1].startswith(("remoting-", "oneway-"))) >= expected:
            break
        time.sleep(0.5)
    for mid, (tag, body) in sent.items():
        if mid not in pulled:
            fail(f"acknowledged message {mid} ({body}) not pulled")
        ptag, pbody, keys, seq = pulled[mid]
        if (ptag, pbody) != (tag, body):
            fail(f"message {mid} pulled as {ptag}/{pbody}, sent as {tag}/{body}")
        if keys != f"key-{body.split('-')[1]}" or seq != body.split("-")[1]:
            fail(f"message {mid} pulled with keys {keys!r} and seq {seq!r}")
    oneway = sum(1 for v in pulled.values() if v[1].startswith("oneway-"))
    if oneway != args.oneway:
        fail(f"{oneway} of {args.oneway} oneway messages pulled")
    for mid, (tag, body, _, _) in pulled.items():
        print(f"PULLED {mid} {tag} {body}", flush=True)
    log(f"pull consumer read all {len(pulled)} messages once each")

    want = {mid for mid, (tag, _) in sent.items() if tag == "TagA"}
    got = {}
    lock = threading.Lock()

    def on_message(msg):
        with lock:
            got[text(msg.id)] = text(msg.tags)

    push = PushConsumer(args.group)
    push.set_namesrv_addr(args.namesrv)
    push.subscribe(args.topic, on_message, "TagA")
    push.start()
    deadline = time.time() + 45
    while time.time() < deadline:
        with lock:
            if want <= set(got):
                break
        time.sleep(0.2)
    time.sleep(1)
    push.shutdown()
    with lock:
        missing = want - set(got)
        other = {m: t for m, t in got.items() if t != "TagA"}
    if missing:
        fail(f"push consumer missed {len(missing)} TagA messages: {sorted(missing)[:5]}")
    if other:
        fail(f"push consumer subscribed to TagA got {other}")
    log(f"push consumer got the {len(want)} TagA messages and nothing else")
    print("RESULT ok", flush=True)
    finish(0)


if __name__ == "__main__":
    main()
