"""The ACLs of a cluster: one document under the metadata store's ``acls`` key, shared by
every broker. Each broker answers from its metadata image, which the store's watch keeps up
to date (``MetadataImage.acls``), so an ACL created through any broker is enforced by every
broker without a restart; a change is a compare-and-swap of the whole document, retried
when another broker changed it in between.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from oncelog.broker.cluster.metadata_cache import MetadataCache
from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.security.acl import AclBinding, AclBindingFilter, decode_acls, encode_acls
from oncelog.security.acl_store import apply_deletions

log = logging.getLogger(__name__)

# current bindings -> (the bindings to store, what the caller returns)
_Change = Callable[[frozenset[AclBinding]],
                   tuple[frozenset[AclBinding], list[list[AclBinding]]]]


class ClusterAclStore:
    def __init__(self, store: EtcdMetadataStore, cache: MetadataCache) -> None:
        self._store = store
        self._cache = cache
        self._decoded_from: bytes | None = None
        self._bindings: frozenset[AclBinding] = frozenset()

    def current(self) -> frozenset[AclBinding]:
        data = self._cache.image.acls
        if data is not self._decoded_from:
            self._bindings = decode_acls(data)
            self._decoded_from = data
        return self._bindings

    async def _update(self, change: str, fn: _Change) -> list[list[AclBinding]]:
        while True:
            data, revision = await self._store.read_acls()
            updated, result = fn(decode_acls(data))
            if await self._store.write_acls(encode_acls(updated), revision):
                return result
            log.info("ACLs changed by another broker during %s; retrying", change)

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        new = frozenset(bindings)
        await self._update("create", lambda current: (current | new, []))

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        return await self._update("delete", lambda current: apply_deletions(current, filters))
