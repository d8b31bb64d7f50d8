"""The RocketMQ 4.x Remoting client (PyPI `rocketmq` 0.4.4) against a cluster with
authentication on: it signs every request with its session credentials (HMAC-SHA1).

--mode signed: a producer with --access-key/--secret-key sends, and a pull consumer with them
reads the one message sent. --mode wrong (a wrong secret) and --mode none (no credentials): the
send fails. One mode per process: the client shares its route tables and connections between
the producers of a process.
Exit 0 on success, 1 on a failed check, 2 on the overall timeout.
"""

import argparse

from common import fail, finish, log, start_watchdog
from rocketmq.client import Message, Producer, PullConsumer, SendStatus


def producer(namesrv, group, credentials):
    p = Producer(group)
    p.set_namesrv_addr(namesrv)
    if credentials:
        p.set_session_credentials(credentials[0], credentials[1], "")
    p.start()
    return p


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--pull-group", required=True)
    p.add_argument("--access-key", required=True)
    p.add_argument("--secret-key", required=True)
    p.add_argument("--mode", choices=["signed", "wrong", "none"], required=True)
    args = p.parse_args()
    start_watchdog(90)
    good = (args.access_key, args.secret_key)
    if args.mode != "signed":
        credentials = (args.access_key, "wrong") if args.mode == "wrong" else None
        refused = producer(args.namesrv, "PID_REFUSED", credentials)
        m = Message(args.topic)
        m.set_body("refused")
        try:
            r = refused.send_sync(m)
            if r.status == SendStatus.OK:
                fail(f"a send with --mode {args.mode} was acknowledged")
        except Exception as e:
            log(f"a send with --mode {args.mode} was refused: {str(e).splitlines()[0][:100]}")
        print("RESULT refused", flush=True)
        finish(0)
    signed = producer(args.namesrv, "PID_SIGNED", good)
    m = Message(args.topic)
    m.set_body("signed")
    r = signed.send_sync(m)
    if r.status != SendStatus.OK:
        fail(f"the signed send answered {r.status}")
    signed.shutdown()
    consumer = PullConsumer(args.pull_group)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.set_session_credentials(args.access_key, args.secret_key, "")
    consumer.start()
    bodies = [m.body.decode() for m in consumer.pull(args.topic)]
    consumer.shutdown()
    if bodies != ["signed"]:
        fail(f"pulled {bodies}, expected only the signed message")
    log("only the signed send was stored, and a signed pull read it")
    print("RESULT ok", flush=True)
    finish(0)


if __name__ == "__main__":
    main()
