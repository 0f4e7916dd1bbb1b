"""The verify worker's client adapter for confluent-kafka (librdkafka)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from oncelog.security.sasl_plain import parse_jaas_config
from oncelog.verify.clients import ClientError, ClientSettings, Record

OFFSET_BEGINNING = -2


def _translate(exc: KafkaException) -> ClientError:
    error = exc.args[0] if exc.args else None
    if not isinstance(error, KafkaError):
        return ClientError("retriable", str(exc))
    if error.fatal():
        return ClientError("fatal", error.str())
    if error.txn_requires_abort():
        return ClientError("abortable", error.str())
    return ClientError("retriable", error.str())


class _Delivery:
    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self.done = False
        self.result: int | None = None

    def on_delivery(self, error: KafkaError | None, message: Any) -> None:
        self.done = True
        self.result = None if error is not None else int(message.offset())

    def offset(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while not self.done and time.monotonic() < deadline:
            self._producer.poll(0.05)
        return self.result


def librdkafka_configs(configs: Mapping[str, str]) -> dict[str, str]:
    """Client configs by the Java client's names (``--command-config``) as librdkafka takes
    them: the JAAS line's username/password, the PEM truststore as ``ssl.ca.location``, a PEM
    keystore (chain and key in one file) as certificate and key; others as they are."""
    out: dict[str, str] = {}
    for key, value in configs.items():
        if key == "sasl.jaas.config":
            options = parse_jaas_config(value).options
            out.update({f"sasl.{k}": options[k] for k in ("username", "password")
                        if k in options})
        elif key == "ssl.truststore.location":
            out["ssl.ca.location"] = value
        elif key == "ssl.keystore.location":
            out["ssl.certificate.location"] = out["ssl.key.location"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value or "none"
        elif key not in ("ssl.truststore.type", "ssl.keystore.type"):
            out[key] = value
    return out


class ConfluentTxnClient:
    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        self._generation = 0
        self.consumer = Consumer({
            "bootstrap.servers": settings.bootstrap, "group.id": settings.group,
            "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 60000,
            "fetch.wait.max.ms": 100, "socket.timeout.ms": 5000,
            "reconnect.backoff.max.ms": 1000, **librdkafka_configs(settings.configs),
        })
        self.consumer.subscribe([settings.input_topic], on_assign=self._on_rebalance,
                                on_revoke=self._on_rebalance, on_lost=self._on_rebalance)
        self.producer: Producer | None = None

    def _on_rebalance(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._generation += 1

    def _producer(self) -> Producer:
        if self.producer is None:
            raise ClientError("fatal", "producer not initialised")
        return self.producer

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KafkaException as exc:
            raise _translate(exc) from exc
        except (BufferError, RuntimeError) as exc:
            raise ClientError("retriable", f"{type(exc).__name__}: {exc}") from exc

    def init(self) -> None:
        if self.producer is not None:
            self.producer.flush(0)
        timeout_ms = int(self.settings.call_timeout_s * 1000)
        self.producer = Producer({
            "bootstrap.servers": self.settings.bootstrap,
            "transactional.id": self.settings.transactional_id,
            "transaction.timeout.ms": self.settings.transaction_timeout_ms,
            "message.timeout.ms": min(timeout_ms, self.settings.transaction_timeout_ms),
            "socket.timeout.ms": 5000, "reconnect.backoff.max.ms": 1000, "linger.ms": 1,
            **librdkafka_configs(self.settings.configs),
        })
        self._call(self.producer.init_transactions, self.settings.call_timeout_s)

    def generation(self) -> int:
        return self._generation

    def begin(self) -> None:
        self._call(self._producer().begin_transaction)

    def poll(self, max_records: int, timeout: float) -> list[Record]:
        messages = self._call(self.consumer.consume, max_records, timeout)
        records = []
        for m in messages:
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise ClientError("retriable", m.error().str())
            records.append(Record(m.topic(), m.partition(), m.offset(),
                                  (m.value() or b"").decode()))
        return records

    def send(self, topic: str, partition: int, value: str) -> _Delivery:
        producer = self._producer()
        delivery = _Delivery(producer)
        self._call(producer.produce, topic, value.encode(), partition=partition,
                   on_delivery=delivery.on_delivery)
        return delivery

    def flush(self, timeout: float) -> None:
        left = self._call(self._producer().flush, timeout)
        if left:
            raise ClientError("retriable", f"{left} records not acknowledged in {timeout}s")

    def send_offsets(self, positions: dict[tuple[str, int], int]) -> None:
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        self._call(self._producer().send_offsets_to_transaction, offsets,
                   self.consumer.consumer_group_metadata(), self.settings.call_timeout_s)

    def commit(self) -> None:
        self._call(self._producer().commit_transaction, self.settings.call_timeout_s)

    def abort(self) -> None:
        self._call(self._producer().abort_transaction, self.settings.call_timeout_s)

    def seek_to_committed(self) -> None:
        assignment = self._call(self.consumer.assignment)
        if not assignment:
            return
        committed = self._call(self.consumer.committed, assignment, self.settings.call_timeout_s)
        for tp in committed:
            if tp.error is not None:
                raise ClientError("retriable", f"committed offset of {tp}: {tp.error}")
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self._call(self.consumer.seek, TopicPartition(tp.topic, tp.partition, offset))

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(1.0)
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError):  # best effort at exit
            pass
