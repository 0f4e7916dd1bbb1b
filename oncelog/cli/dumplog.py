"""``oncelog dump-log FILE...``: what a partition's files hold (kafka-dump-log.sh; its
``--files F1,F2`` works too).

Reads files, no broker (stop the broker first, or copy the files). By suffix:

- ``.log``: one line per batch (offsets, count, producer id/epoch, base sequence,
  transactional and control flags, position, create time, size, CRC and whether it matches);
  control batches show their marker (COMMIT/ABORT, coordinator epoch); ``--print-data-log``
  adds one line per record (offset, timestamp, key, value, headers), ``--deep-iteration``
  one with the record's metadata (sizes, sequence, header keys). ``--verify`` exits 1 if
  any batch's CRC does not match (or the file ends in a torn batch).
- ``.index`` / ``.timeindex``: the entries (offset -> position, timestamp -> offset);
  ``--index-sanity-check`` checks their shape, ``--verify-index-only`` their entries against
  the .log beside them (exit 1 on a problem).
- ``.txnindex``: the aborted transactions (producer id, first/last offset, LSO).
- ``.snapshot``: the producer state (id, epoch, last sequence, open transaction).
"""

from __future__ import annotations

import argparse
import itertools
import struct
import sys
from pathlib import Path

from oncelog.cli.common import CommandError, add_hints, run_command
from oncelog.errors import KafkaError
from oncelog.records.batch import HEADER_SIZE, LOG_OVERHEAD, parse_header
from oncelog.records.codec import decode_batch
from oncelog.records.control import decode_control
from oncelog.records.validate import batch_crc

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")


DECODER_HINT = ("oncelog dump-log prints records as text (key, payload, headers); it has no "
                "decoders for internal topics or metadata logs")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dump-log", help="print the contents of log, index and snapshot files",
        description="Print what a partition's files hold (as kafka-dump-log.sh): .log "
        "batches and markers, .index, .timeindex, .txnindex and producer .snapshot files. "
        "Files are given as arguments or, as kafka-dump-log.sh takes them, --files F1,F2.",
    )
    p.add_argument("paths", nargs="*", type=Path, metavar="FILE", help="files to dump")
    p.add_argument("--files", action="append", default=[], metavar="FILE[,FILE...]",
                   help="the same, comma-separated, as kafka-dump-log.sh takes them")
    p.add_argument("--print-data-log", action="store_true",
                   help="also print each record of a .log file (key, value, headers)")
    p.add_argument("--deep-iteration", action="store_true",
                   help="a line per record of a .log file (offset, timestamp, key and value "
                        "sizes, sequence, header keys); implied by --print-data-log")
    p.add_argument("--skip-record-metadata", action="store_true",
                   help="record lines without their metadata, and no control records")
    p.add_argument("--max-bytes", type=int, default=None, metavar="N",
                   help="read only the batches within the first N bytes of a .log file")
    p.add_argument("--verify-index-only", action="store_true",
                   help="check .index and .timeindex entries against the .log beside them "
                        "instead of printing them; mismatches go to stderr (exit 1)")
    p.add_argument("--index-sanity-check", action="store_true",
                   help="only check that .index and .timeindex files are well formed, as a "
                        "broker does at start-up")
    p.add_argument("--verify", action="store_true",
                   help="check every batch's CRC; exit 1 if one does not match")
    add_hints(p, {flag: DECODER_HINT for flag in (
        "--offsets-decoder", "--transaction-log-decoder", "--cluster-metadata-decoder",
        "--remote-log-metadata-decoder", "--share-group-state-decoder",
        "--key-decoder-class", "--value-decoder-class")})
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


def dump_log(path: Path, data: bytes, print_data: bool, deep: bool = False,
             skip_metadata: bool = False, limited: bool = False) -> int:
    """Print the batches (with ``deep`` or ``print_data`` their records); the number of bad
    ones (CRC mismatch, undecodable, torn tail; a tail cut by ``limited`` is not one)."""
    bad = 0
    pos = 0
    while pos < len(data):
        if len(data) - pos < HEADER_SIZE:
            if limited:
                return bad
            print(f"position: {pos} torn batch: {len(data) - pos} trailing bytes")
            return bad + 1
        header = parse_header(data, pos)
        size = header.batch_length + LOG_OVERHEAD
        if header.batch_length <= 0 or pos + size > len(data):
            if limited:
                return bad
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
        if valid and (print_data or deep or header.is_control):
            try:
                _, records = decode_batch(data, pos, verify_crc=False)
            except KafkaError as exc:
                print(f"| cannot decode the records: {exc}")
                bad += 1
                records = []
            for record in records:
                if header.is_control:
                    if skip_metadata:
                        continue
                    try:
                        kind, coordinator_epoch = decode_control(record)
                        print(f"| offset: {record.offset} CreateTime: {record.timestamp} "
                              f"endTxnMarker: {kind.name} coordinatorEpoch: {coordinator_epoch}")
                    except KafkaError:
                        print(f"| offset: {record.offset} unknown control record")
                    continue
                fields = []
                if not skip_metadata:
                    fields.append(f"offset: {record.offset} CreateTime: {record.timestamp}")
                    if not print_data:
                        sequence = (-1 if header.base_sequence < 0
                                    else header.base_sequence + record.offset
                                    - header.base_offset)
                        fields.append(
                            f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
                            f"sequence: {sequence} "
                            f"headerKeys: [{','.join(k for k, _ in record.headers)}]")
                if print_data:
                    headers = ",".join(f"{k}:{_show(v)}" for k, v in record.headers)
                    fields.append(f"key: {_show(record.key)} payload: {_show(record.value)} "
                                  f"headers: {headers or '[]'}")
                print("| " + " ".join(fields))
        pos += size
    return bad


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


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


def check_index(path: Path, data: bytes, entry_size: int, log: bytes | None
                ) -> list[str]:
    """What is wrong with an .index / .timeindex file: for ``log`` None its shape (whole
    entries, offsets that do not go back: the start-up sanity check), else its entries
    against the batches of ``log`` (each entry's offset is the last offset of a batch: at
    its position for an offset index; a time index's timestamp is that batch's largest,
    increasing)."""
    base = _base_offset(path)
    problems = []
    if len(data) % entry_size:
        problems.append(f"{path}: {len(data)} bytes is not a whole number of "
                        f"{entry_size}-byte entries")
    entries = []
    for at in range(0, len(data) - len(data) % entry_size, entry_size):
        if entry_size == _OFFSET_ENTRY.size:
            relative, value = _OFFSET_ENTRY.unpack_from(data, at)
        else:
            value, relative = _TIME_ENTRY.unpack_from(data, at)
        if at and relative == 0 and value == 0:
            break  # preallocated, unused
        entries.append((base + relative, value))
    for (before, _), (offset, _) in itertools.pairwise(entries):
        if offset < before:
            problems.append(f"{path}: offset {offset} follows {before}")
    if log is None:
        return problems
    batches = {}  # position -> (last offset, max timestamp)
    pos = 0
    while len(log) - pos >= HEADER_SIZE:
        header = parse_header(log, pos)
        if header.batch_length <= 0:
            break
        batches[pos] = (header.last_offset, header.max_timestamp)
        pos += header.batch_length + LOG_OVERHEAD
    if entry_size == _OFFSET_ENTRY.size:
        for offset, position in entries:
            found = batches.get(position)
            if found is None or found[0] != offset:
                problems.append(f"{path}: index offset: {offset}, log offset: "
                                f"{found[0] if found else 'no batch at position ' + str(position)}")
        return problems
    by_last = dict(batches.values())
    previous = -1
    for offset, timestamp in entries:
        if offset not in by_last:
            problems.append(f"{path}: indexed offset {offset} is not the last offset of a "
                            "batch")
        elif by_last[offset] != timestamp:
            problems.append(f"{path}: found timestamp mismatch: index timestamp {timestamp}, "
                            f"log timestamp {by_last[offset]}")
        if timestamp <= previous:
            problems.append(f"{path}: out of order timestamp: {timestamp} after {previous}")
        previous = timestamp
    return problems


def cmd_dump(args: argparse.Namespace) -> int:
    paths = list(args.paths) + [Path(name.strip()) for item in args.files
                                for name in item.split(",") if name.strip()]
    if not paths:
        raise CommandError("name the files to dump: FILE... or --files FILE[,FILE...]", 2)
    if args.max_bytes is not None and args.max_bytes < 0:
        raise CommandError("--max-bytes must be 0 or more", 2)
    bad = 0
    problems: list[str] = []
    for path in paths:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        print(f"Dumping {path}")
        suffix = path.suffix
        if suffix == ".log":
            limited = args.max_bytes is not None and args.max_bytes < len(data)
            if limited:
                data = data[:args.max_bytes]
            bad += dump_log(path, data, args.print_data_log, args.deep_iteration,
                            args.skip_record_metadata, limited)
        elif suffix in (".index", ".timeindex") and (args.index_sanity_check
                                                     or args.verify_index_only):
            entry = _OFFSET_ENTRY.size if suffix == ".index" else _TIME_ENTRY.size
            log = None
            if args.verify_index_only:
                try:
                    log = path.with_suffix(".log").read_bytes()
                except OSError as exc:
                    raise CommandError(f"cannot read the log of {path}: {exc}") from None
            found = check_index(path, data, entry, log)
            problems += found
            if args.index_sanity_check and not found:
                print(f"{path} passed sanity check.")
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
    for problem in problems:
        print(f"oncelog: {problem}", file=sys.stderr)
    if args.verify and bad:
        print(f"oncelog: {bad} bad batches", file=sys.stderr)
        return 1
    return 1 if problems else 0
