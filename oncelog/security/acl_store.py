"""Where the ACLs live. ``AclStore`` is what the broker needs: ``current()`` answers every
authorization from memory (synchronously), ``create`` / ``delete`` apply a CreateAcls /
DeleteAcls request durably. ``FileAclStore`` keeps them in ``acls.json`` in the data
directory (one node), written with the project's atomic writer and loaded at start; a
cluster keeps them in the metadata store (oncelog.broker.cluster.acls), watched by every
broker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from oncelog.security.acl import AclBinding, AclBindingFilter, decode_acls, encode_acls
from oncelog.storage.files import atomic_write

log = logging.getLogger(__name__)

ACLS_FILE = "acls.json"


class AclStore(Protocol):
    def current(self) -> frozenset[AclBinding]: ...

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        """Add the bindings (already validated; existing ones are kept once)."""
        ...

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every binding a filter matches; the bindings each filter removed."""
        ...


def apply_deletions(current: frozenset[AclBinding], filters: Sequence[AclBindingFilter]
                    ) -> tuple[frozenset[AclBinding], list[list[AclBinding]]]:
    """The bindings left and, per filter, the bindings it matched (sorted)."""
    matched = [sorted(b for b in current if f.matches(b)) for f in filters]
    removed = {b for found in matched for b in found}
    return current - removed, matched


class MemoryAclStore:
    """The ACLs in memory only (tests; the base of the file store)."""

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._bindings = frozenset(bindings)

    def current(self) -> frozenset[AclBinding]:
        return self._bindings

    def _replace(self, bindings: frozenset[AclBinding]) -> None:
        self._bindings = bindings

    async def create(self, bindings: Iterable[AclBinding]) -> None:
        self._replace(self._bindings | frozenset(bindings))

    async def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        left, matched = apply_deletions(self._bindings, filters)
        if left != self._bindings:
            self._replace(left)
        return matched


class FileAclStore(MemoryAclStore):
    """One node: ``acls.json`` in the data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / ACLS_FILE
        super().__init__(decode_acls(self.path.read_bytes()) if self.path.exists() else ())
        log.info("%d ACLs loaded from %s", len(self.current()), self.path)

    def _replace(self, bindings: frozenset[AclBinding]) -> None:
        atomic_write(self.path, encode_acls(bindings))
        super()._replace(bindings)
