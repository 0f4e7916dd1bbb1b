"""The verify worker's client adapter for ``oncelog.client`` (Producer + Consumer)."""

from __future__ import annotations

import concurrent.futures
from typing import Any

from oncelog.client import Consumer, OffsetAndMetadata, Producer, TopicPartition
from oncelog.client.delivery import DeliveryFuture
from oncelog.client.errors import AbortableError, FatalError, KafkaClientError
from oncelog.verify.clients import ClientError, ClientSettings, Record


def _translate(exc: BaseException) -> ClientError:
    if isinstance(exc, FatalError):
        return ClientError("fatal", str(exc))
    if isinstance(exc, AbortableError):
        return ClientError("abortable", str(exc))
    return ClientError("retriable", f"{type(exc).__name__}: {exc}")


class _Delivery:
    def __init__(self, future: DeliveryFuture) -> None:
        self._future = future

    def offset(self, timeout: float) -> int | None:
        try:
            return self._future.result(timeout).offset
        except (KafkaClientError, concurrent.futures.TimeoutError,
                concurrent.futures.CancelledError):
            return None


class OncelogTxnClient:
    def __init__(self, settings: ClientSettings) -> None:
        self.settings = settings
        timeout_ms = int(settings.call_timeout_s * 1000)
        common: dict[str, Any] = {
            "bootstrap.servers": settings.bootstrap,
            "request.timeout.ms": min(timeout_ms, 5000),
            "default.api.timeout.ms": timeout_ms,
            "socket.connection.setup.timeout.ms": 3000,
            "reconnect.backoff.max.ms": 1000,
            "retry.backoff.max.ms": 1000,
            "allow.auto.create.topics": False,
            **settings.configs,
        }
        self.consumer = Consumer({
            **common, "group.id": settings.group, "isolation.level": "read_committed",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "max.poll.records": 20, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 60000,
            "fetch.max.wait.ms": 100,
        })
        self.consumer.subscribe([settings.input_topic])
        self._common = common
        self.producer: Producer | None = None

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (KafkaClientError, concurrent.futures.TimeoutError, TimeoutError) as exc:
            raise _translate(exc) from exc

    def _producer(self) -> Producer:
        if self.producer is None:
            raise ClientError("fatal", "producer not initialised")
        return self.producer

    def init(self) -> None:
        if self.producer is not None:
            try:
                self.producer.close(1.0)
            except Exception:  # closing a broken producer; a new one replaces it
                pass
        self.producer = Producer({
            **self._common, "transactional.id": self.settings.transactional_id,
            "transaction.timeout.ms": self.settings.transaction_timeout_ms,
            "max.block.ms": int(self.settings.call_timeout_s * 1000),
            "delivery.timeout.ms": int(self.settings.call_timeout_s * 1000),
            "linger.ms": 1,
        })
        self._call(self.producer.init_transactions, timeout=self.settings.call_timeout_s)

    def generation(self) -> int:
        return self.consumer.group_metadata().generation_id

    def begin(self) -> None:
        self._call(self._producer().begin_transaction)

    def poll(self, max_records: int, timeout: float) -> list[Record]:
        messages = self._call(self.consumer.poll, timeout)
        return [Record(m.topic, m.partition, m.offset, (m.value or b"").decode())
                for m in messages[:max_records]]

    def send(self, topic: str, partition: int, value: str) -> _Delivery:
        return _Delivery(self._call(self._producer().send, topic, value.encode(),
                                    partition=partition))

    def flush(self, timeout: float) -> None:
        left = self._call(self._producer().flush, timeout)
        if left:
            raise ClientError("retriable", f"{left} records not acknowledged in {timeout}s")

    def send_offsets(self, positions: dict[tuple[str, int], int]) -> None:
        offsets = {TopicPartition(t, p): OffsetAndMetadata(o) for (t, p), o in positions.items()}
        self._call(self._producer().send_offsets_to_transaction, offsets,
                   self.consumer.group_metadata(), timeout=self.settings.call_timeout_s)

    def commit(self) -> None:
        self._call(self._producer().commit_transaction, timeout=self.settings.call_timeout_s)

    def abort(self) -> None:
        self._call(self._producer().abort_transaction, timeout=self.settings.call_timeout_s)

    def seek_to_committed(self) -> None:
        assignment = self.consumer.assignment()
        if not assignment:
            return
        committed = self._call(self.consumer.committed, assignment)
        missing = [tp for tp in assignment if committed.get(tp) is None]
        for tp, oam in committed.items():
            if oam is not None:
                self._call(self.consumer.seek, tp, oam.offset)
        if missing:
            self._call(self.consumer.seek_to_beginning, missing)

    def close(self) -> None:
        for close in ((self.producer.close if self.producer else None), self.consumer.close):
            if close is None:
                continue
            try:
                close(2.0)
            except Exception:  # best effort at exit
                pass
