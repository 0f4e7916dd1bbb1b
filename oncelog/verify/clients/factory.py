"""The verify worker's client by name (the adapters import the package's types, so the
factory lives beside them rather than in the package itself)."""

from __future__ import annotations

from collections.abc import Callable

from oncelog.verify.clients import CLIENTS, ClientSettings, TxnClient


def make_client(name: str, settings: ClientSettings) -> TxnClient:
    factories: dict[str, Callable[[ClientSettings], TxnClient]] = {
        "oncelog": _oncelog, "confluent-kafka": _confluent}
    if name not in factories:
        raise ValueError(f"unknown client {name!r}; one of {', '.join(CLIENTS)}")
    return factories[name](settings)


def _oncelog(settings: ClientSettings) -> TxnClient:
    from oncelog.verify.clients.oncelog_client import OncelogTxnClient
    return OncelogTxnClient(settings)


def _confluent(settings: ClientSettings) -> TxnClient:
    from oncelog.verify.clients.confluent import ConfluentTxnClient
    return ConfluentTxnClient(settings)
