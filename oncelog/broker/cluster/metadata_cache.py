"""``MetadataCache``: this broker's ``MetadataImage`` of the cluster metadata, kept up to date
from the metadata store's watch (the asyncio shell around ``oncelog.cluster.metadata``).

``load()`` reads the whole image at one revision; ``follow()`` (a task of the broker's
TaskGroup) then applies every watched change after that revision, in order, until the store
is closed. If the watch breaks (etcd restarted or unreachable, the revision compacted), it
logs one line, loads the image again (retrying every ``retry_backoff_s``) and watches from
the new revision: the image is replaced in place, so holders of ``cache.image`` keep a live
reference.

Two ways to hear about changes:
- ``subscribe(callback)``: ``callback(event, image)`` is called synchronously after each
  event has been applied, in the store's order; after a reload it is called once with
  ``event=None`` (the image was replaced wholesale: re-read what you depend on). A callback
  that raises is logged and does not stop the others.
- ``await cache.wait_for(predicate)``: returns the image once ``predicate(image)`` holds
  (checked now and after every change); ``await cache.changed()`` waits for the next change.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable

from oncelog.cluster.metadata import (
    MetadataEvent,
    MetadataImage,
    MetadataStore,
    MetadataStoreError,
)
from oncelog.faults import METADATA_DELAY_MS

__all__ = ["MetadataCache", "MetadataListener"]

logger = logging.getLogger(__name__)

MetadataListener = Callable[[MetadataEvent | None, MetadataImage], None]


class MetadataCache:
    """The image of the cluster metadata one broker decides from."""

    def __init__(self, store: MetadataStore, *, retry_backoff_s: float = 1.0) -> None:
        self.store = store
        self.retry_backoff_s = retry_backoff_s
        self.image = MetadataImage()
        self.reloads = 0  # how often a broken watch made the cache load again
        self._listeners: list[MetadataListener] = []
        self._changed = asyncio.Event()
        self._loaded = False

    # -- lifecycle ----------------------------------------------------------------------------
    async def load(self) -> MetadataImage:
        """Read the whole image (at one revision of the store); call before ``follow()``."""
        self._replace(await self.store.load())
        self._loaded = True
        logger.info(
            "metadata image loaded at revision %d: %d brokers, %d topics, %d partitions",
            self.image.revision, len(self.image.brokers), len(self.image.topics),
            len(self.image.partitions),
        )
        return self.image

    async def follow(self) -> None:
        """Apply the store's changes to the image until the store is closed (or the task is
        cancelled); a broken watch is followed by a reload."""
        if not self._loaded:
            await self.load()
        while True:
            try:
                async for event in self.store.watch(self.image.revision):
                    if METADATA_DELAY_MS:
                        await asyncio.sleep(METADATA_DELAY_MS / 1000)
                    self._apply(event)
                logger.info("metadata watch ended at revision %d (store closed)",
                            self.image.revision)
                return
            except MetadataStoreError as exc:
                logger.warning("metadata watch broke after revision %d: %s; reloading",
                               self.image.revision, exc)
            await self._reload()

    async def _reload(self) -> None:
        while True:
            await asyncio.sleep(self.retry_backoff_s)
            try:
                image = await self.store.load()
            except MetadataStoreError as exc:
                logger.warning("metadata reload failed: %s; retrying in %.1fs", exc,
                               self.retry_backoff_s)
                continue
            self.reloads += 1
            self._replace(image)
            logger.info("metadata image reloaded at revision %d", image.revision)
            self._notify(None)
            return

    # -- changes ------------------------------------------------------------------------------
    def subscribe(self, listener: MetadataListener) -> Callable[[], None]:
        """Call ``listener(event, image)`` after every change; returns the unsubscribe."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def renotify(self) -> None:
        """Call every listener with ``event=None``, as after a reload, without reading the
        store: for a change of this broker's own standing (its session lost or back) that
        makes listeners re-read the image."""
        self._notify(None)

    async def changed(self) -> None:
        """Wait for the next change of the image."""
        await self._changed.wait()

    async def wait_for(
        self, predicate: Callable[[MetadataImage], bool], timeout: float | None = None
    ) -> MetadataImage:
        """The image, once ``predicate(image)`` holds; TimeoutError after ``timeout``."""
        async with asyncio.timeout(timeout):
            while not predicate(self.image):
                await self.changed()
        return self.image

    def _apply(self, event: MetadataEvent) -> None:
        self.image.apply(event)
        self._notify(event)

    def _replace(self, image: MetadataImage) -> None:
        for field in dataclasses.fields(MetadataImage):
            setattr(self.image, field.name, getattr(image, field.name))

    def _notify(self, event: MetadataEvent | None) -> None:
        for listener in list(self._listeners):
            try:
                listener(event, self.image)
            except Exception:
                logger.exception("metadata listener %r failed on %r", listener, event)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
