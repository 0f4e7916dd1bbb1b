"""ElectLeaders in cluster mode: the controller decides, as in Kafka.

A broker that is not the controller forwards the request unchanged to the controller broker
(Kafka forwards ElectLeaders to its controller) and relays the answer: the elected controller
is the only writer of leadership, so the election and the writes stay fenced by its epoch
(``as_controller``) and serialised with its other decisions under its lock. The controller
runs ``controller_decisions.elect_leaders`` over its image, writes the new states with
compare-and-swap, and answers once this broker's image shows every new leader epoch (bounded
by the request's timeout).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from oncelog.broker.cluster.metadata_cache import MetadataCache
from oncelog.broker.cluster.peers import PeerConnections
from oncelog.cluster.controller_decisions import ElectionType, PartitionKey
from oncelog.cluster.metadata import MetadataImage
from oncelog.errors import ErrorCode

__all__ = ["ClusterElections"]

log = logging.getLogger(__name__)


class Elector(Protocol):
    """What an election needs of the controller shell (``oncelog.broker.cluster.controller.
    Controller``; a protocol, so that the request context, which holds this object, does not
    depend on the controller, whose statistics the metrics module renders)."""

    @property
    def image(self) -> MetadataImage: ...

    async def elect_leaders(
        self, election: ElectionType, partitions: Sequence[PartitionKey] | None,
        timeout_s: float,
    ) -> dict[PartitionKey, ErrorCode] | None: ...


class ClusterElections:
    """ElectLeaders run by the controller (here, or forwarded to the controller broker)."""

    def __init__(self, controller: Elector, cache: MetadataCache,
                 peers: PeerConnections) -> None:
        self.controller = controller
        self.cache = cache
        self.peers = peers

    async def forward(self, request: Any, timeout_ms: int) -> Any:
        """The controller broker's answer to ``request``; LookupError when the controller
        is not a live broker."""
        controller_id = self.peers.view.controller_id()
        conn = await self.peers.get(controller_id)
        log.info("ElectLeaders forwarded to the controller, broker %d", controller_id)
        return await conn.send(request, timeout_ms=timeout_ms)

    async def elect(
        self, election: ElectionType, partitions: Sequence[PartitionKey] | None,
        timeout_ms: int,
    ) -> dict[PartitionKey, ErrorCode] | None:
        """Each partition's error code once the image shows the elections; None when this
        broker is not the controller."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        before = {k: v.state.leader_epoch for k, v in self.controller.image.partitions.items()}
        errors = await self.controller.elect_leaders(election, partitions, timeout_ms / 1000)
        if errors is None:
            return None
        elected = [k for k, code in errors.items() if code is ErrorCode.none]
        log.info("ElectLeaders %s: %d partition(s) elected, %d answered with an error",
                 election.name, len(elected), len(errors) - len(elected))
        try:
            await self.cache.wait_for(lambda image: all(
                k in image.partitions
                and image.partitions[k].state.leader_epoch > before.get(k, -1)
                for k in elected), max(0.0, deadline - loop.time()))
        except TimeoutError:
            image = self.cache.image
            for key in elected:
                seen = image.partitions.get(key)
                if seen is None or seen.state.leader_epoch <= before.get(key, -1):
                    errors[key] = ErrorCode.request_timed_out
        return errors
