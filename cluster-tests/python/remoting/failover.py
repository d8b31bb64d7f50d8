"""A Remoting producer (PyPI `rocketmq` 0.4.4) given one node's name server address, that node a
follower; the leader is SIGKILLed (--kill-pid) after a third of the sends. Every send must still
be acknowledged (the client retries), and every acknowledged message must be pulled afterwards,
once. Exit 0 on success, 1 on a failed check, 2 on the overall timeout.
"""

import argparse
import os
import signal
import time

from common import fail, finish, log, start_watchdog
from rocketmq.client import Message, Producer, PullConsumer, SendStatus


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--pull-group", required=True)
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--kill-pid", type=int, required=True)
    args = p.parse_args()
    start_watchdog(120)
    producer = Producer("PID_REMOTING_FAILOVER")
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    acked = {}
    longest, last = 0.0, time.time()
    for i in range(args.count):
        if i == args.count // 3:
            os.kill(args.kill_pid, signal.SIGKILL)
            log(f"leader (pid {args.kill_pid}) SIGKILLed after {i} acknowledged sends")
        m = Message(args.topic)
        m.set_body(f"failover-{i}")
        for attempt in range(20):
            try:
                r = producer.send_sync(m)
                if r.status == SendStatus.OK:
                    acked[r.msg_id] = f"failover-{i}"
                    break
            except Exception as e:  # the client raises on a failed send after its own retries
                log(f"send {i} attempt {attempt} failed: {e}")
                time.sleep(0.2)
        now = time.time()
        longest, last = max(longest, now - last), now
    producer.shutdown()
    if len(acked) != args.count:
        fail(f"{args.count - len(acked)} sends never acknowledged")
    pulled = {}
    consumer = PullConsumer(args.pull_group)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.start()
    for msg in consumer.pull(args.topic):
        mid = msg.id.decode() if isinstance(msg.id, bytes) else msg.id
        pulled[mid] = msg.body.decode()
    consumer.shutdown()
    lost = [mid for mid in acked if pulled.get(mid) != acked[mid]]
    if lost:
        fail(f"{len(lost)} acknowledged messages not pulled: {lost[:5]}")
    print(f"RESULT acknowledged={len(acked)} pulled={len(pulled)} longest_gap_s={longest:.2f}", flush=True)
    finish(0)


if __name__ == "__main__":
    main()
