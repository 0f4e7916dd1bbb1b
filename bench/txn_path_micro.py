"""Micro-benchmark of the broker's small-transaction path, no network: CPU per transaction.

    .venv/bin/python bench/txn_path_micro.py [--txns 4000] [--producers 8] [--profile FILE]

A real single-node broker (``oncelog.broker.broker.Broker``, a temporary data dir, default
configs) runs in this process; instead of sockets, request frames go straight to the
server's request path (``Server._handle``: header and body decoding, the handler,
authorization, response encoding), one after the other. Each transaction is what
confluent-kafka sends for one small transaction: AddPartitionsToTxn v3, Produce v9 (one
batch of 10 x 100 B, acks=all), EndTxn v3 (commit). ``--producers`` transactional ids take
turns, each on its own partition; the markers are written by the coordinator's own tasks as
in the broker (EndTxn answers once they are, so the next transaction of an id never meets
CONCURRENT_TRANSACTIONS; every answer is checked for errors after the timed part).
Reported: CPU µs per transaction of this process (the broker's whole work except the
socket layer, which ``bench/request_floor.py`` measures apart). ``--profile`` writes
cProfile stats of the timed part.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from oncelog.broker.broker import Broker
from oncelog.client.wire import decode_response, encode_request
from oncelog.config import BrokerConfig
from oncelog.protocol.build import make, request_module
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.security.principal import anonymous_session

INIT_PRODUCER_ID, ADD_PARTITIONS, PRODUCE, END_TXN = 22, 24, 0, 26
VERSIONS = {INIT_PRODUCER_ID: 4, ADD_PARTITIONS: 3, PRODUCE: 9, END_TXN: 3}
TOPIC = "micro"


class Wire:
    """Request frames as oncelog.client encodes them (without the size prefix the server's
    reader strips), response bodies as it reads them."""

    def __init__(self) -> None:
        self.correlation = 0

    def frame(self, api_key: int, body: Any) -> bytes:
        self.correlation += 1
        return encode_request(self.correlation, "micro", body)[4:]

    @staticmethod
    def answer(api_key: int, frame: bytes) -> Any:
        return decode_response(api_key, VERSIONS[api_key], frame)


class Producer:
    def __init__(self, wire: Wire, index: int) -> None:
        self.wire = wire
        self.partition = index
        self.transactional_id = f"micro-{index}"
        self.producer_id = -1
        self.epoch = -1
        self.sequence = 0

    def init(self) -> bytes:
        mod = request_module(INIT_PRODUCER_ID, VERSIONS[INIT_PRODUCER_ID])
        return self.wire.frame(INIT_PRODUCER_ID, make(
            mod.InitProducerIdRequest, transactional_id=self.transactional_id,
            transaction_timeout=60_000, producer_id=-1, producer_epoch=-1))

    def add_partitions(self) -> bytes:
        mod = request_module(ADD_PARTITIONS, VERSIONS[ADD_PARTITIONS])
        return self.wire.frame(ADD_PARTITIONS, make(
            mod.AddPartitionsToTxnRequest, v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=(make(mod.AddPartitionsToTxnTopic, name=TOPIC,
                                      partitions=(self.partition,)),)))

    def produce(self, value: bytes) -> bytes:
        mod = request_module(PRODUCE, VERSIONS[PRODUCE])
        records = encode_batch([RecordInput(None, value) for _ in range(10)],
                               producer_id=self.producer_id, producer_epoch=self.epoch,
                               base_sequence=self.sequence, transactional=True)
        self.sequence += 10
        return self.wire.frame(PRODUCE, make(
            mod.ProduceRequest, transactional_id=self.transactional_id, acks=-1,
            timeout=30_000, topic_data=(make(mod.TopicProduceData, name=TOPIC, partition_data=(
                make(mod.PartitionProduceData, index=self.partition, records=records),)),)))

    def end_txn(self) -> bytes:
        mod = request_module(END_TXN, VERSIONS[END_TXN])
        return self.wire.frame(END_TXN, make(
            mod.EndTxnRequest, transactional_id=self.transactional_id,
            producer_id=self.producer_id, producer_epoch=self.epoch, committed=True))


def _errors(entity: Any) -> list[int]:
    """Every error code in a response entity, nested ones included."""
    found: list[int] = []
    for name in getattr(entity, "__dataclass_fields__", {}):
        value = getattr(entity, name)
        if name == "error_code":
            found.append(int(value))
        elif isinstance(value, tuple):
            for item in value:
                found.extend(_errors(item))
        elif hasattr(value, "__dataclass_fields__"):
            found.extend(_errors(value))
    return found


async def run(txns: int, producers: int, profile: Path | None) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(prefix="txn-micro-"))
    broker = Broker(BrokerConfig({}), data_dir=data / "data", listen=("127.0.0.1", 0))
    ready = asyncio.Event()
    serving = asyncio.create_task(broker.run(lambda host, port: ready.set()))
    try:
        await ready.wait()
        broker.partitions.create_topic(TOPIC, producers)
        session = anonymous_session("127.0.0.1")
        wire = Wire()

        clients = [Producer(wire, i) for i in range(producers)]
        for client in clients:
            response = await broker.server._handle(client.init(), session)
            assert isinstance(response, bytes)
            answer = wire.answer(INIT_PRODUCER_ID, response[4:])
            client.producer_id, client.epoch = int(answer.producer_id), int(answer.producer_epoch)
        value = b"x" * 100
        # Frames are built outside the timed part: a client's work, not the broker's.
        rounds = txns // producers
        plan = [[(ADD_PARTITIONS, c.add_partitions()), (PRODUCE, c.produce(value)),
                 (END_TXN, c.end_txn())] for _ in range(rounds) for c in clients]
        profiler = cProfile.Profile() if profile is not None else None
        started_cpu, started = time.process_time(), time.perf_counter()
        if profiler is not None:
            profiler.enable()
        answers: list[tuple[int, bytes | bool | None]] = []
        for steps in plan:
            for api_key, frame in steps:
                answers.append((api_key, await broker.server._handle(frame, session)))
        await broker.transactions.wait_completions()
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(str(profile))
        cpu, wall = time.process_time() - started_cpu, time.perf_counter() - started
        done = rounds * producers
        for api_key, response in answers:  # checked after the timed part: a client's work
            if not isinstance(response, bytes):
                raise RuntimeError(f"API {api_key} answered {response!r}")
            errors = [e for e in _errors(wire.answer(api_key, response[4:])) if e]
            if errors:
                raise RuntimeError(f"API {api_key} answered errors {errors}")
        return {"txns": done, "cpu_us_per_txn": 1e6 * cpu / done,
                "wall_us_per_txn": 1e6 * wall / done}
    finally:
        broker.request_stop()
        await serving
        shutil.rmtree(data, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--txns", type=int, default=4000)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--profile", type=Path, help="write cProfile stats of the timed part")
    args = parser.parse_args()
    result = asyncio.run(run(args.txns, args.producers, args.profile))
    print(f"{result['txns']:,} transactions ({args.producers} producers): "
          f"{result['cpu_us_per_txn']:.0f} µs CPU per transaction "
          f"({result['wall_us_per_txn']:.0f} µs wall)")


if __name__ == "__main__":
    main()
