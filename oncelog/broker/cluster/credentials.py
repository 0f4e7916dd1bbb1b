"""SCRAM credentials of a cluster: one document under the metadata store's
``scram_credentials`` key, shared by every broker. Lookups are answered from memory,
refreshed from the store before each SCRAM login (``refresh``), so a user added through any
broker can log in at every broker; ``alter`` is a compare-and-swap of the whole document,
retried when another broker changed it in between.
"""

from __future__ import annotations

import logging

from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.security.credentials import (
    MemoryCredentials,
    ScramCredential,
    apply_changes,
    decode_credentials,
    encode_credentials,
)

log = logging.getLogger(__name__)


class ClusterCredentialStore(MemoryCredentials):
    def __init__(self, store: EtcdMetadataStore) -> None:
        super().__init__()
        self._store = store

    async def refresh(self) -> None:
        data, _ = await self._store.read_scram_credentials()
        self.credentials = decode_credentials(data) if data else {}

    async def alter(self, upserts: dict[tuple[str, str], ScramCredential],
                    deletions: set[tuple[str, str]]) -> None:
        while True:
            data, revision = await self._store.read_scram_credentials()
            current = decode_credentials(data) if data else {}
            updated = apply_changes(current, upserts, deletions)
            if await self._store.write_scram_credentials(encode_credentials(updated),
                                                         revision):
                self.credentials = updated
                return
            log.info("SCRAM credentials changed by another broker meanwhile; retrying")
