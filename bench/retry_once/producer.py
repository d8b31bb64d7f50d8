"""One official Python producer (rocketmq-python-client 5.1.2) sending unique messages to a
topic through one node until a stop file appears; every acknowledged message id goes to stdout,
one per line, and the sends that failed after the client's own retries are counted on stderr.

    python producer.py --endpoints 127.0.0.1:8081 --topic Once --stop /tmp/stop --name p1
"""

import argparse
import os
import sys
import time

from rocketmq import ClientConfiguration, Credentials, Message, Producer


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoints", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--stop", required=True, help="stop once this file exists")
    parser.add_argument("--name", required=True, help="prefix of the message bodies")
    args = parser.parse_args()
    producer = Producer(ClientConfiguration(args.endpoints, Credentials()), (args.topic,))
    producer.startup()
    failed = 0
    n = 0
    while not os.path.exists(args.stop):
        msg = Message()
        msg.topic = args.topic
        msg.body = f"{args.name}-{n}".encode()
        msg.tag = "once"
        n += 1
        try:
            receipt = producer.send(msg)
            print(receipt.message_id, flush=True)
        except Exception:  # every attempt failed: the message may or may not be stored
            failed += 1
            time.sleep(0.05)
    print(f"{args.name}: {n} sent, {failed} failed after the client's retries", file=sys.stderr, flush=True)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
