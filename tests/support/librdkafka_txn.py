"""A confluent-kafka (librdkafka) transactional producer driven over stdin and stdout, for
cluster tests that cannot share a process with it: a librdkafka call that hangs cannot be
abandoned (the handle cannot be destroyed under it, and its broker threads may spin), so the
test kills this process instead.

    python -m tests.support.librdkafka_txn BOOTSTRAP TXN_ID GROUP TOPIC TIMEOUT [KEY=VALUE...]

It commits one transaction with a record on TOPIC partition 0 and the group's offset 1 for
it (so the group's coordinator is known and cached), begins a second with another record,
prints ``ready`` and waits for a line on stdin. Then it calls
``send_offsets_to_transaction(offset 2, TIMEOUT)`` and ``commit_transaction(TIMEOUT)``,
printing a line per call as it returns: ``send_offsets ok 2.318`` or
``send_offsets error 5.001 <error>`` (seconds the call took). KEY=VALUE pairs are added to
the producer's configuration; librdkafka's debug log (``eos,broker,protocol,metadata``) goes
to stderr.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main(argv: list[str]) -> int:
    bootstrap, txn_id, group, topic, timeout = argv[:5]
    extra = dict(arg.split("=", 1) for arg in argv[5:])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "acks": "all", "debug": "eos,broker,protocol,metadata", **extra})
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    producer.init_transactions(30)
    for n in (1, 2):
        producer.begin_transaction()
        producer.produce(topic, value=f"txn{n}".encode(), partition=0)
        if producer.flush(30):
            raise SystemExit("records not acknowledged")
        if n == 1:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)],
                                                 consumer.consumer_group_metadata(), 30)
            producer.commit_transaction(30)
    print("ready", flush=True)
    sys.stdin.readline()
    calls = (("send_offsets", lambda: producer.send_offsets_to_transaction(
                  [TopicPartition(topic, 0, 2)], consumer.consumer_group_metadata(),
                  float(timeout))),
             ("commit", lambda: producer.commit_transaction(float(timeout))))
    for name, call in calls:
        started = time.monotonic()
        try:
            call()
        except KafkaException as exc:
            print(f"{name} error {time.monotonic() - started:.3f} {exc}", flush=True)
            return 1
        print(f"{name} ok {time.monotonic() - started:.3f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
