"""Request handlers, one module per API family.

A handler is ``async def handle_x(ctx: RequestContext, request) -> response`` registered with
``@handles(API_KEY, min_version, max_version)``. Handlers are thin: validate, call the owner
(partition registry, group coordinator, ...), build the response with
``oncelog.protocol.build.make``. KafkaError raised by owners becomes an error code in the
response at the handler; anything else is logged by the server, which answers the request
with UNKNOWN_SERVER_ERROR in every entry (see ``oncelog.protocol.error_response``).

Handlers reach the broker's services only through ``ctx.services`` (a ``BrokerContext``).
``SUPPORTED`` is the table of version ranges this broker serves, filled by ``@handles``
(ApiVersions answers it; the server checks requests against it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog.security.principal import ANONYMOUS, Session

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext


@dataclass(slots=True)
class RequestContext:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_host: str
    services: BrokerContext
    # Who sent the request (the connection's authenticated principal, its listener).
    session: Session = field(default_factory=lambda: Session(ANONYMOUS, "?"))


Handler = Callable[[RequestContext, Any], Awaitable[Any]]

HANDLERS: dict[int, Handler] = {}
SUPPORTED: dict[int, tuple[int, int]] = {}


def handles(api_key: int, min_version: int, max_version: int) -> Callable[[Handler], Handler]:
    """Register a handler and the version range it serves."""

    def register(fn: Handler) -> Handler:
        if api_key in HANDLERS:
            raise RuntimeError(f"two handlers for API key {api_key}")
        HANDLERS[api_key] = fn
        SUPPORTED[api_key] = (min_version, max_version)
        return fn

    return register


def load_all() -> None:
    """Import every API module so that each registers its handlers."""
    import importlib
    import pkgutil

    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
