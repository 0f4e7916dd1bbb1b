"""``oncelog users ... --data-dir DIR`` / ``--metadata-etcd-endpoints HOST:PORT``: SCRAM
credentials written straight into a broker's credential store, with no broker to ask —
what ``kafka-storage.sh format --add-scram`` is for in Kafka: the first users of a cluster
whose listeners all need a SCRAM login.

The stores are the brokers' own (oncelog.security.credentials.FileCredentialStore in a
single node's data directory, oncelog.broker.cluster.credentials.ClusterCredentialStore
under the metadata store's ``scram_credentials`` key). A data directory is taken with the
broker's own lock, so it is refused while a broker runs on it (the broker keeps its
credentials in memory and would write over the change); etcd is a compare-and-swap, safe
while brokers run, which read it again before every SCRAM login.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from oncelog.broker.cluster.credentials import ClusterCredentialStore
from oncelog.broker.datadir import DataDirError, DataDirLock
from oncelog.cli.common import CommandError
from oncelog.cluster.metadata import MetadataStoreError
from oncelog.cluster.metadata_store import EtcdMetadataStore, parse_endpoints
from oncelog.security.credentials import (
    MECHANISMS,
    CredentialStore,
    FileCredentialStore,
    ScramCredential,
)

DEFAULT_ETCD_PREFIX = "/oncelog"


def add_store_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "offline store (instead of --bootstrap-server; no broker is asked)")
    where = group.add_mutually_exclusive_group()
    where.add_argument("--data-dir", type=Path, default=None, metavar="DIR",
                       help="a stopped single node's data directory (default: none, ask a "
                       "broker)")
    where.add_argument("--metadata-etcd-endpoints", default=None, metavar="HOST:PORT[,...]",
                       help="a cluster's etcd, as the brokers' metadata.etcd.endpoints "
                       "(default: none, ask a broker)")
    group.add_argument("--metadata-etcd-prefix", default=DEFAULT_ETCD_PREFIX, metavar="PREFIX",
                       help="the brokers' metadata.etcd.prefix (default %(default)s)")


def is_offline(args: argparse.Namespace) -> bool:
    return args.data_dir is not None or args.metadata_etcd_endpoints is not None


@asynccontextmanager
async def _store(args: argparse.Namespace) -> AsyncIterator[CredentialStore]:
    if args.data_dir is not None:
        lock = DataDirLock(args.data_dir)
        try:
            lock.acquire()
        except DataDirError as exc:
            raise CommandError(str(exc)) from None
        try:
            yield FileCredentialStore(args.data_dir)
        finally:
            lock.release()
        return
    try:
        endpoints = parse_endpoints(args.metadata_etcd_endpoints)
    except ValueError as exc:
        raise CommandError(f"--metadata-etcd-endpoints: {exc}", exit_code=2) from None
    metadata = EtcdMetadataStore(endpoints, prefix=args.metadata_etcd_prefix)
    try:
        store = ClusterCredentialStore(metadata)
        await store.refresh()
        yield store
    except MetadataStoreError as exc:
        raise CommandError(f"etcd {args.metadata_etcd_endpoints}: {exc}") from None
    finally:
        await metadata.close()


def add(args: argparse.Namespace, password: str) -> None:
    mechanism = MECHANISMS[args.mechanism]
    if not mechanism.min_iterations <= args.iterations <= mechanism.max_iterations:
        raise CommandError(f"--iterations must be {mechanism.min_iterations}.."
                           f"{mechanism.max_iterations} for {args.mechanism}", exit_code=2)
    credential = ScramCredential.from_password(mechanism, password, secrets.token_bytes(32),
                                               args.iterations)

    async def body() -> None:
        async with _store(args) as store:
            await store.alter({(args.name, args.mechanism): credential}, set())
    asyncio.run(body())


def remove(args: argparse.Namespace) -> list[str]:
    async def body() -> list[str]:
        async with _store(args) as store:
            have = store.describe().get(args.name, {})
            mechanisms = [args.mechanism] if args.mechanism else sorted(have)
            missing = [m for m in mechanisms if m not in have]
            if not mechanisms or missing:
                raise CommandError(f"user {args.name}: no {', '.join(missing) or 'SCRAM'} "
                                   "credential to remove")
            await store.alter({}, {(args.name, m) for m in mechanisms})
            return mechanisms
    return asyncio.run(body())


def describe(args: argparse.Namespace) -> dict[str, dict[str, int]]:
    async def body() -> dict[str, dict[str, int]]:
        async with _store(args) as store:
            return store.describe()
    found = asyncio.run(body())
    return {user: infos for user, infos in found.items()
            if not args.names or user in args.names}
