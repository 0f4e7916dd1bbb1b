"""The transaction API handlers over a real coordinator: request shapes per version, errors
mapped for old clients, and responses that encode on the wire."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

from txn_support import A0, A1, TIMEOUT_MS, TXN, Env, make_env, run

from oncelog.broker.api import RequestContext, producers, transactions
from oncelog.broker.partitions import Partition
from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module
from oncelog.protocol.codec import encode_response
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches
from oncelog.storage.unified_log import UnifiedLog
from tests.support.fake_cluster_view import FakeClusterView, coordinating

E = ErrorCode
T = TypeVar("T")


class FakeRegistry:
    def __init__(self, known: set[tuple[str, int]]) -> None:
        self.known = known

    def find(self, topic: str, index: int) -> object | None:
        return object() if (topic, index) in self.known else None


def view_of(known: set[tuple[str, int]]) -> FakeClusterView:
    """This broker coordinates everything and leads the ``known`` partitions; other
    partitions are unknown to the cluster (AddPartitionsToTxn checks the cluster's metadata,
    as Kafka checks its metadata cache)."""
    view = coordinating(1, "localhost", 9092)
    view.lead_everything = False
    for topic, index in known:
        view.lead(topic, index, leader=1)
    return view


def ctx_for(env: Env, api_key: int, version: int) -> RequestContext:
    broker = SimpleNamespace(transactions=env.coord, partitions=FakeRegistry({A0, A1}),
                             cluster=view_of({A0, A1}), authorizer=None)
    return RequestContext(api_key, version, 1, "test", "127.0.0.1", broker)  # type: ignore[arg-type]


def req(api_key: int, version: int, cls_name: str, /, **fields: Any) -> Any:
    return make(getattr(request_module(api_key, version), cls_name), **fields)


def encodes(api_key: int, version: int, response: Any) -> None:
    assert encode_response(api_key, version, 1, response)[:4] != b"\0\0\0\0"


async def awaited(pending: Awaitable[T]) -> T:
    """Await a handler's answer: ``@handles`` types a handler as returning an Awaitable, and
    asyncio.run takes only a coroutine."""
    return await pending


async def init(env: Env, version: int = 4, **fields: Any) -> Any:
    fields = {"transactional_id": TXN, **fields}
    request = req(versions.INIT_PRODUCER_ID, version, "InitProducerIdRequest",
                  transaction_timeout=TIMEOUT_MS, **fields)
    response = await producers.handle_init_producer_id(
        ctx_for(env, versions.INIT_PRODUCER_ID, version), request
    )
    encodes(versions.INIT_PRODUCER_ID, version, response)
    return response


def topics(mod_version: int, *parts: tuple[str, int]) -> tuple[Any, ...]:
    by: dict[str, list[int]] = {}
    for topic, index in parts:
        by.setdefault(topic, []).append(index)
    return tuple(
        req(versions.ADD_PARTITIONS_TO_TXN, mod_version, "AddPartitionsToTxnTopic",
            name=t, partitions=tuple(ids))
        for t, ids in by.items()
    )


def flatten(topic_results: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.name, int(p.partition_index)): p.partition_error_code
        for t in topic_results for p in t.results_by_partition
    }


def test_client_flow_v3_add_v1_end(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        first = await init(env, 3)
        assert first.error_code is E.none
        pid, epoch = first.producer_id, first.producer_epoch
        v = 3
        add = req(versions.ADD_PARTITIONS_TO_TXN, v, "AddPartitionsToTxnRequest",
                  v3_and_below_transactional_id=TXN, v3_and_below_producer_id=pid,
                  v3_and_below_producer_epoch=epoch,
                  v3_and_below_topics=topics(v, A0, ("missing", 0)))
        response = await transactions.handle_add_partitions_to_txn(
            ctx_for(env, versions.ADD_PARTITIONS_TO_TXN, v), add)
        encodes(versions.ADD_PARTITIONS_TO_TXN, v, response)
        assert flatten(response.results_by_topic_v3_and_below) == {
            A0: E.operation_not_attempted, ("missing", 0): E.unknown_topic_or_partition,
        }
        add = req(versions.ADD_PARTITIONS_TO_TXN, v, "AddPartitionsToTxnRequest",
                  v3_and_below_transactional_id=TXN, v3_and_below_producer_id=pid,
                  v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics(v, A0, A1))
        response = await transactions.handle_add_partitions_to_txn(
            ctx_for(env, versions.ADD_PARTITIONS_TO_TXN, v), add)
        assert flatten(response.results_by_topic_v3_and_below) == {A0: E.none, A1: E.none}
        offsets = req(versions.ADD_OFFSETS_TO_TXN, 0, "AddOffsetsToTxnRequest",
                      transactional_id=TXN, producer_id=pid, producer_epoch=epoch, group_id="g")
        response = await transactions.handle_add_offsets_to_txn(
            ctx_for(env, versions.ADD_OFFSETS_TO_TXN, 0), offsets)
        encodes(versions.ADD_OFFSETS_TO_TXN, 0, response)
        assert response.error_code is E.none
        # An old client learns of fencing as INVALID_PRODUCER_EPOCH.
        stale = req(versions.END_TXN, 1, "EndTxnRequest", transactional_id=TXN,
                    producer_id=pid, producer_epoch=epoch + 1, committed=True)
        response = await transactions.handle_end_txn(ctx_for(env, versions.END_TXN, 1), stale)
        assert response.error_code is E.invalid_producer_epoch
        end = req(versions.END_TXN, 1, "EndTxnRequest", transactional_id=TXN,
                  producer_id=pid, producer_epoch=epoch, committed=True)
        response = await transactions.handle_end_txn(ctx_for(env, versions.END_TXN, 1), end)
        encodes(versions.END_TXN, 1, response)
        assert response.error_code is E.none

    run(env, body)
    assert {tp for tp, commit, _, _ in env.markers.written if commit} >= {A0, A1}


def test_end_txn_v5_returns_the_bumped_epoch(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        first = await init(env, 5)
        pid, epoch = first.producer_id, first.producer_epoch
        await env.coord.handle_add_partitions(TXN, pid, epoch, [A0])
        end = req(versions.END_TXN, 5, "EndTxnRequest", transactional_id=TXN,
                  producer_id=pid, producer_epoch=epoch, committed=False)
        response = await transactions.handle_end_txn(ctx_for(env, versions.END_TXN, 5), end)
        encodes(versions.END_TXN, 5, response)
        assert (response.error_code, response.producer_id, response.producer_epoch) == (
            E.none, pid, epoch + 1,
        )

    run(env, body)


def test_add_partitions_v5_batched_and_verify_only(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    v = 5

    async def body() -> None:
        first = await init(env)
        pid = first.producer_id
        mod = request_module(versions.ADD_PARTITIONS_TO_TXN, v)
        add = make(mod.AddPartitionsToTxnRequest, transactions=(
            make(mod.AddPartitionsToTxnTransaction, transactional_id=TXN, producer_id=pid,
                 producer_epoch=0, verify_only=False, topics=topics(v, A0)),
            make(mod.AddPartitionsToTxnTransaction, transactional_id="unknown", producer_id=1,
                 producer_epoch=0, verify_only=False, topics=topics(v, A1)),
        ))
        response = await transactions.handle_add_partitions_to_txn(
            ctx_for(env, versions.ADD_PARTITIONS_TO_TXN, v), add)
        encodes(versions.ADD_PARTITIONS_TO_TXN, v, response)
        results = {r.transactional_id: flatten(r.topic_results)
                   for r in response.results_by_transaction}
        assert results == {TXN: {A0: E.none}, "unknown": {A1: E.invalid_producer_id_mapping}}
        verify = make(mod.AddPartitionsToTxnRequest, transactions=(
            make(mod.AddPartitionsToTxnTransaction, transactional_id=TXN, producer_id=pid,
                 producer_epoch=0, verify_only=True, topics=topics(v, A0, A1)),
        ))
        response = await transactions.handle_add_partitions_to_txn(
            ctx_for(env, versions.ADD_PARTITIONS_TO_TXN, v), verify)
        assert flatten(response.results_by_transaction[0].topic_results) == {
            A0: E.none, A1: E.transaction_abortable,
        }

    run(env, body)


def test_init_producer_id_v3_maps_fenced_and_v5_serves_kip360(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        first = await init(env, 3)
        fenced = await init(env, 3, producer_id=first.producer_id, producer_epoch=7)
        assert fenced.error_code is E.invalid_producer_epoch
        fenced = await init(env, 4, producer_id=first.producer_id, producer_epoch=7)
        assert fenced.error_code is E.producer_fenced
        bumped = await init(env, 5, producer_id=first.producer_id, producer_epoch=0)
        assert (bumped.error_code, bumped.producer_epoch) == (E.none, 1)

    run(env, body)


def test_idempotent_init_producer_id_is_answered_by_the_coordinator(tmp_path: Path) -> None:
    """One producer id path: InitProducerId without a transactional id (any version, also a
    KIP-360 retry with the current id and epoch) gets a fresh id with epoch 0 from the
    transaction coordinator's producer id manager; the broker context offers no other."""
    env = make_env(tmp_path)

    async def body() -> None:
        seen = set()
        for version, fields in ((0, {}), (4, {}), (5, {"producer_id": 0, "producer_epoch": 0})):
            response = await init(env, version, transactional_id=None, **fields)
            assert (response.error_code, response.producer_epoch) == (E.none, 0)
            seen.add(response.producer_id)
        assert len(seen) == 3
        transactional = await init(env, 4)
        assert transactional.producer_id not in seen

    run(env, body)
    assert env.store.appends == 1  # only the transactional id was logged


def test_write_txn_markers_is_refused_to_clients(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    v = 1
    mod = request_module(versions.WRITE_TXN_MARKERS, v)
    request = make(mod.WriteTxnMarkersRequest, markers=(
        make(mod.WritableTxnMarker, producer_id=5, producer_epoch=0, transaction_result=True,
             coordinator_epoch=0, topics=(
                 make(mod.WritableTxnMarkerTopic, name="a", partition_indexes=(0, 1)),)),
    ))
    response = asyncio.run(awaited(transactions.handle_write_txn_markers(
        ctx_for(env, versions.WRITE_TXN_MARKERS, v), request)))
    encodes(versions.WRITE_TXN_MARKERS, v, response)
    codes = [p.error_code for m in response.markers for t in m.topics for p in t.partitions]
    assert codes == [E.cluster_authorization_failed] * 2
    assert env.markers.calls == []


def test_client_abort_marker_cannot_raise_the_coordinator_epoch(tmp_path: Path) -> None:
    # Written, a client's coordinator epoch 5 would make the partition refuse the real
    # coordinator's markers (epoch 0) as TRANSACTION_COORDINATOR_FENCED from then on.
    env = make_env(tmp_path)
    log = UnifiedLog.open(tmp_path / "a-0", LogConfig(), FakeClock())
    data = bytearray(encode_batch([RecordInput(key=b"k", value=b"v")], producer_id=5,
                                  producer_epoch=0, base_sequence=0, transactional=True))
    log.append(data, validate_batches(data, max_batch_bytes=10**6))
    partition = Partition("a", 0, log)
    broker = SimpleNamespace(transactions=env.coord,
                             partitions=SimpleNamespace(find=lambda t, i: partition),
                             cluster=coordinating(1, "localhost", 9092), authorizer=None)
    ctx = RequestContext(versions.WRITE_TXN_MARKERS, 1, 1, "test", "127.0.0.1",
                         broker)  # type: ignore[arg-type]
    mod = request_module(versions.WRITE_TXN_MARKERS, 1)

    def abort(coordinator_epoch: int) -> list[ErrorCode]:
        request = make(mod.WriteTxnMarkersRequest, markers=(
            make(mod.WritableTxnMarker, producer_id=5, producer_epoch=0,
                 transaction_result=False, coordinator_epoch=coordinator_epoch, topics=(
                     make(mod.WritableTxnMarkerTopic, name="a", partition_indexes=(0,)),)),
        ))
        response = asyncio.run(awaited(transactions.handle_write_txn_markers(ctx, request)))
        return [p.error_code for m in response.markers for t in m.topics for p in t.partitions]

    assert env.coord.coordinator_epoch == 0
    assert abort(5) == [E.invalid_request]
    assert log.log_end_offset == 1 and log.last_stable_offset == 0
    # The coordinator's own marker still goes through (here: the commit it decided).
    log.append_marker(5, 0, 0, commit=True)
    assert log.last_stable_offset == log.log_end_offset == 2
    # An operator's abort at the coordinator's epoch is accepted.
    assert abort(0) == [E.none]


def test_list_and_describe_transactions(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        first = await init(env)
        await env.coord.handle_add_partitions(TXN, first.producer_id, 0, [A0, A1])
        for v in (0, 1, 2):
            extra: dict[str, Any] = {"duration_filter": -1} if v >= 1 else {}
            request = req(versions.LIST_TRANSACTIONS, v, "ListTransactionsRequest",
                          state_filters=("Ongoing", "Weird"), producer_id_filters=(), **extra)
            response = await transactions.handle_list_transactions(
                ctx_for(env, versions.LIST_TRANSACTIONS, v), request)
            encodes(versions.LIST_TRANSACTIONS, v, response)
            assert [(s.transactional_id, s.transaction_state)
                    for s in response.transaction_states] == [(TXN, "Ongoing")]
            assert response.unknown_state_filters == ("Weird",)
        request = req(versions.DESCRIBE_TRANSACTIONS, 0, "DescribeTransactionsRequest",
                      transactional_ids=(TXN, "missing"))
        response = await transactions.handle_describe_transactions(
            ctx_for(env, versions.DESCRIBE_TRANSACTIONS, 0), request)
        encodes(versions.DESCRIBE_TRANSACTIONS, 0, response)
        found, missing = response.transaction_states
        assert (found.error_code, found.transaction_state) == (E.none, "Ongoing")
        assert [(t.topic, t.partitions) for t in found.topics] == [("a", (0, 1))]
        assert int(found.transaction_start_time.timestamp() * 1000) == env.clock.now_ms()
        assert missing.error_code is E.transactional_id_not_found

    run(env, body)
