"""The write gap a RocketMQ 4.x producer (PyPI `rocketmq` 0.4.4) sees when a node dies.

    target/python-remoting/bin/python bench/remoting_failover.py PID "HOST:PORT;HOST:PORT"

Sends 400 messages of topic Failover (`rockraft topic create Failover` first) one at a time through
the given name server addresses (Remoting listeners),
SIGKILLs process PID after 100, and prints which Remoting address the client was connected to,
the longest time between two acknowledged sends, and how many sends the application saw fail
(each is tried again until acknowledged).
"""

import os
import signal
import subprocess
import sys
import time

from rocketmq.client import Message, Producer, SendStatus


def main():
    kill_pid, namesrv = int(sys.argv[1]), sys.argv[2]
    ports = [a.rsplit(":", 1)[1] for a in namesrv.split(";")]
    producer = Producer("PID_FAILOVER_GAP")
    producer.set_namesrv_addr(namesrv)
    producer.start()
    longest, failed, last = 0.0, 0, time.time()
    for i in range(400):
        if i == 100:
            ss = subprocess.run(["ss", "-tnH", "state", "established"], capture_output=True, text=True).stdout
            connected = sorted({p for p in ports for line in ss.splitlines() if line.split()[-1].endswith(":" + p)})
            print(f"connected to port(s) {', '.join(connected)}; killing pid {kill_pid}", flush=True)
            os.kill(kill_pid, signal.SIGKILL)
        m = Message("Failover")
        m.set_body(f"gap-{i}")
        while True:
            try:
                if producer.send_sync(m).status == SendStatus.OK:
                    break
            except Exception:
                failed += 1
                time.sleep(0.1)
        now = time.time()
        longest, last = max(longest, now - last), now
    print(f"acknowledged=400 failed_sends_seen={failed} longest_gap_s={longest:.2f}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
