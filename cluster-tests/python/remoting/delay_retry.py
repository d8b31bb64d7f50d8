"""Delayed messages and retries of the RocketMQ 4.x Remoting client (PyPI `rocketmq` 0.4.4).

1. A message sent with delay level 2 (5 s) to --delay-topic is not there to pull before 4 s and
   is there within 15 s.
2. A clustering PushConsumer of --group whose callback always fails: the client sends the
   message back; it comes again from the group's retry topic (about 10 s later, level 3), fails
   again, and (the group allows 2 deliveries) lands in the dead-letter topic %DLQ%<group>, where a
   PullConsumer of --dlq-reader reads it with its body.

Exit 0 on success, 1 on a failed check, 2 on the overall timeout.
"""

import argparse
import threading
import time

from common import fail, finish, log, start_watchdog, text
from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, SendStatus


def pull_all(namesrv, group, topic):
    consumer = PullConsumer(group)
    consumer.set_namesrv_addr(namesrv)
    consumer.start()
    PullConsumer.offset_table = {}
    out = {text(m.id): text(m.body) for m in consumer.pull(topic)}
    consumer.shutdown()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv", required=True)
    p.add_argument("--delay-topic", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--pull-group", required=True)
    p.add_argument("--dlq-reader", required=True)
    args = p.parse_args()
    start_watchdog(110)

    producer = Producer("PID_REMOTING_DELAY")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    m = Message(args.delay_topic)
    m.set_body("later")
    m.set_delay_time_level(2)
    sent_at = time.time()
    r = producer.send_sync(m)
    if r.status != SendStatus.OK:
        fail(f"delayed send answered {r.status}")
    early = pull_all(args.namesrv, args.pull_group, args.delay_topic)
    if r.msg_id in early and time.time() - sent_at < 4:
        fail("a message delayed by 5 s was there to pull at once")
    while True:
        got = pull_all(args.namesrv, args.pull_group, args.delay_topic)
        if got.get(r.msg_id) == "later":
            waited = time.time() - sent_at
            break
        if time.time() - sent_at > 15:
            fail("the delayed message never came")
        time.sleep(0.3)
    if waited < 4:
        fail(f"the delayed message came after {waited:.1f} s, before its 5 s")
    log(f"the message delayed by 5 s came after {waited:.1f} s")

    deliveries = []
    lock = threading.Lock()

    def always_fail(msg):
        with lock:
            deliveries.append((time.time(), text(msg.body), msg.reconsume_times))
        raise RuntimeError("this listener always fails")

    push = PushConsumer(args.group)
    push.set_namesrv_addr(args.namesrv)
    push.subscribe(args.topic, always_fail)
    push.start()
    time.sleep(3)
    m = Message(args.topic)
    m.set_body("doomed")
    r = producer.send_sync(m)
    if r.status != SendStatus.OK:
        fail(f"send answered {r.status}")
    dead = {}
    deadline = time.time() + 60
    while time.time() < deadline:
        dead = pull_all(args.namesrv, args.dlq_reader, "%DLQ%" + args.group)
        if "doomed" in dead.values():
            break
        time.sleep(0.5)
    push.shutdown()
    producer.shutdown()
    with lock:
        seen = [(round(t - deliveries[0][0], 1), body, times) for t, body, times in deliveries]
    if "doomed" not in dead.values():
        fail(f"the failing message is not in the dead-letter topic; deliveries: {seen}")
    doomed = [d for d in seen if d[1] == "doomed"]
    if len(doomed) != 2:
        fail(f"{len(doomed)} deliveries before the dead-letter topic, 2 allowed: {seen}")
    if doomed[1][0] < 8:
        fail(f"the retry came after {doomed[1][0]} s, before its 10 s (level 3)")
    log(f"delivered {len(doomed)} times ({seen}), then dead-lettered")
    print("RESULT ok", flush=True)
    finish(0)


if __name__ == "__main__":
    main()
