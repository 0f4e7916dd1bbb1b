"""``oncelog dump-log FILE...``: what a partition's files hold (kafka-dump-log.sh --files).

Reads files, no broker (stop the broker first, or copy the files). By suffix:

- ``.log``: one line per batch (offsets, count, producer id/epoch, base sequence,
  transactional and control flags, position, create time, size, CRC and whether it matches);
  control batches show their marker (COMMIT/ABORT, coordinator epoch); ``--print-data-log``
  adds one line per record (offset, timestamp, key, value, headers). ``--verify`` exits 1 if
  any batch's CRC does not match (or the file ends in a torn batch).
- ``.index`` / ``.timeindex``: the entries (offset -> position, timestamp -> offset).
- ``.txnindex``: the aborted transactions (producer id, first/last offset, LSO).
- ``.snapshot``: the producer state (id, epoch, last sequence, open transaction).
"""

from __future__ import annotations

import argparse
import struct
import sys
from pathlib import Path

from oncelog.cli.common import CommandError, run_command
from oncelog.errors import KafkaError
from oncelog.records.batch import HEADER_SIZE, LOG_OVERHEAD, parse_header
from oncelog.records.codec import decode_batch
from oncelog.records.control import decode_control
from oncelog.records.validate import batch_crc

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dump-log", help="print the contents of log, index and snapshot files",
        description="Print what a partition's files hold (as kafka-dump-log.sh): .log "
        "batches and markers, .index, .timeindex, .txnindex and producer .snapshot files.",
    )
    p.add_argument("files", nargs="+", type=Path, metavar="FILE", help="files to dump")
    p.add_argument("--print-data-log", action="store_true",
                   help="also print each record of a .log file (key, value, headers)")
    p.add_argument("--verify", action="store_true",
                   help="check every batch's CRC; exit 1 if one does not match")
    p.set_defaults(handler=cmd_dump, command_name="dump-log")


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, "dump-log")


def _base_offset(path: Path) -> int:
    try:
        return int(path.name.split(".")[0])
    except ValueError:
        return 0


def _show(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def dump_log(path: Path, data: bytes, print_data: bool) -> int:
    """Print the batches; the number of bad ones (CRC mismatch, undecodable, torn tail)."""
    bad = 0
    pos = 0
    while pos < len(data):
        if len(data) - pos < HEADER_SIZE:
            print(f"position: {pos} torn batch: {len(data) - pos} trailing bytes")
            return bad + 1
        header = parse_header(data, pos)
        size = header.batch_length + LOG_OVERHEAD
        if header.batch_length <= 0 or pos + size > len(data):
            print(f"position: {pos} torn batch: length {header.batch_length}, "
                  f"{len(data) - pos} bytes left")
            return bad + 1
        valid = batch_crc(data, pos, size) == header.crc
        bad += not valid
        print(
            f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
            f"count: {header.records_count} baseSequence: {header.base_sequence} "
            f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
            f"producerEpoch: {header.producer_epoch} "
            f"partitionLeaderEpoch: {header.partition_leader_epoch} "
            f"isTransactional: {str(header.is_transactional).lower()} "
            f"isControl: {str(header.is_control).lower()} position: {pos} "
            f"CreateTime: {header.max_timestamp} size: {size} magic: {header.magic} "
            f"compresscodec: {_codec(header.compression)} crc: {header.crc} "
            f"isvalid: {str(valid).lower()}"
        )
        if valid and (print_data or header.is_control):
            try:
                _, records = decode_batch(data, pos, verify_crc=False)
            except KafkaError as exc:
                print(f"| cannot decode the records: {exc}")
                bad += 1
                records = []
            for record in records:
                if header.is_control:
                    try:
                        kind, coordinator_epoch = decode_control(record)
                        print(f"| offset: {record.offset} CreateTime: {record.timestamp} "
                              f"endTxnMarker: {kind.name} coordinatorEpoch: {coordinator_epoch}")
                    except KafkaError:
                        print(f"| offset: {record.offset} unknown control record")
                    continue
                headers = ",".join(f"{k}:{_show(v)}" for k, v in record.headers)
                print(f"| offset: {record.offset} CreateTime: {record.timestamp} "
                      f"key: {_show(record.key)} payload: {_show(record.value)} "
                      f"headers: {headers or '[]'}")
        pos += size
    return bad


def _codec(code: int) -> str:
    return {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}.get(code, str(code))


def dump_offset_index(path: Path, data: bytes) -> None:
    base = _base_offset(path)
    for at in range(0, len(data) - len(data) % 8, 8):
        relative, position = _OFFSET_ENTRY.unpack_from(data, at)
        if at and relative == 0 and position == 0:
            break  # preallocated, unused
        print(f"offset: {base + relative} position: {position}")


def dump_time_index(path: Path, data: bytes) -> None:
    base = _base_offset(path)
    for at in range(0, len(data) - len(data) % 12, 12):
        timestamp, relative = _TIME_ENTRY.unpack_from(data, at)
        if at and timestamp == 0 and relative == 0:
            break
        print(f"timestamp: {timestamp} offset: {base + relative}")


def dump_txn_index(data: bytes) -> None:
    for at in range(0, len(data) - len(data) % _TXN_ENTRY.size, _TXN_ENTRY.size):
        version, producer_id, first, last, lso = _TXN_ENTRY.unpack_from(data, at)
        print(f"version: {version} producerId: {producer_id} firstOffset: {first} "
              f"lastOffset: {last} lastStableOffset: {lso}")


def dump_snapshot(path: Path) -> None:
    from oncelog.storage import snapshot

    try:
        offset, entries = snapshot.read_snapshot(path)
    except Exception as exc:  # any decoding failure of a damaged file
        raise CommandError(f"{path}: not a valid producer snapshot: {exc}") from None
    print(f"snapshot offset: {offset} producers: {len(entries)}")
    for e in entries:
        open_txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
        print(f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
              f"coordinatorEpoch: {e.coordinator_epoch} lastSequence: {e.last_seq} "
              f"lastOffset: {e.last_offset} lastTimestamp: {e.last_timestamp} "
              f"currentTxnFirstOffset: {open_txn}")


def cmd_dump(args: argparse.Namespace) -> int:
    bad = 0
    for path in args.files:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        print(f"Dumping {path}")
        suffix = path.suffix
        if suffix == ".log":
            bad += dump_log(path, data, args.print_data_log)
        elif suffix == ".index":
            dump_offset_index(path, data)
        elif suffix == ".timeindex":
            dump_time_index(path, data)
        elif suffix == ".txnindex":
            dump_txn_index(data)
        elif suffix == ".snapshot":
            dump_snapshot(path)
        else:
            raise CommandError(f"{path}: unknown file type {suffix or '(none)'}; expected "
                               ".log, .index, .timeindex, .txnindex or .snapshot", 2)
    if args.verify and bad:
        print(f"oncelog: {bad} bad batches", file=sys.stderr)
        return 1
    return 0
