"""A minimal raw Kafka connection built on kio, for tests that send what no client would."""

from __future__ import annotations

import datetime
import io
import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.schema.produce.v8.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import TopicName, TransactionalId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32, i32Timedelta


class RawConnection:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def recv_frame(self) -> bytes | None:
        """The next frame's bytes, or None when the broker closed the connection."""
        prefix = self._recv_exact(4)
        if prefix is None:
            return None
        (size,) = struct.unpack(">i", prefix)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> bytes | None:
        chunks = []
        while n:
            try:
                chunk = self.sock.recv(n)
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def header(self, api_key: int, version: int, flexible: bool, client_id: str = "raw") -> bytes:
        self.correlation += 1
        cid = client_id.encode()
        head = struct.pack(">hhih", api_key, version, self.correlation, len(cid)) + cid
        return head + (b"\0" if flexible else b"")

    def request(self, request: Any) -> Any:
        """Send a kio request entity and decode its response."""
        api_key, version = int(request.__api_key__), int(request.__version__)
        body = io.BytesIO()
        entity_writer(type(request))(body, request)
        self.send_frame(self.header(api_key, version, bool(request.__flexible__)) + body.getvalue())
        frame = self.recv_frame()
        assert frame is not None, "broker closed the connection"
        response_cls = load_response_schema(api_key, version)
        (correlation,) = struct.unpack_from(">i", frame, 0)
        assert correlation == self.correlation
        pos = 4
        if response_cls.__flexible__ and api_key != 18:
            pos += 1  # empty tagged fields
        value, _ = entity_reader(response_cls)(frame, pos)
        return value


def request_once(bootstrap: str, request: Any) -> Any:
    """Open a connection, send one request, return its decoded response, close."""
    conn = RawConnection(bootstrap)
    try:
        return conn.request(request)
    finally:
        conn.close()


def produce(
    conn: RawConnection,
    topic: str,
    records: bytes,
    transactional_id: str | None = None,
    *,
    index: int = 0,
    acks: int = -1,
) -> Any:
    """One Produce v8 (acks=all unless ``acks``) of ``records`` to partition ``index``;
    its response."""
    resp = conn.request(
        ProduceRequest(
            transactional_id=(
                None if transactional_id is None else TransactionalId(transactional_id)
            ),
            acks=i16(acks),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
            topic_data=(
                TopicProduceData(
                    name=TopicName(topic),
                    partition_data=(
                        PartitionProduceData(index=i32(index), records=Records(records)),
                    ),
                ),
            ),
        )
    )
    return resp.responses[0].partition_responses[0]
