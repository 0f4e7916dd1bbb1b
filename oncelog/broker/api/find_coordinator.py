"""FindCoordinator (10): which broker coordinates a consumer group or a transactional id.

Authorization first, per key (Kafka's ``KafkaApis.getCoordinator``): Describe on the group
or on the transactional id, else GROUP_AUTHORIZATION_FAILED /
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for that key, with no coordinator.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import allowed
from oncelog.broker.cluster_view import GROUP_KEY, TRANSACTION_KEY, broker_on
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType


@handles(versions.FIND_COORDINATOR, 0, 6)
async def handle_find_coordinator(ctx: RequestContext, request: Any) -> Any:
    """The leader of the key's ``__consumer_offsets`` / ``__transaction_state`` partition,
    from the cluster view; COORDINATOR_NOT_AVAILABLE while that partition has no live
    leader (Kafka's answer). v4+ carries a batch of keys, each answered on its own."""
    mod = response_module(versions.FIND_COORDINATOR, ctx.api_version)
    key_type = int(getattr(request, "key_type", GROUP_KEY))
    if ctx.api_version >= 4:
        coordinators = tuple(
            make(mod.Coordinator, key=key, **_coordinator_node(ctx, key_type, key))
            for key in request.coordinator_keys
        )
        return make(mod.FindCoordinatorResponse, throttle_time=0, coordinators=coordinators)
    return make(
        mod.FindCoordinatorResponse, throttle_time=0,
        **_coordinator_node(ctx, key_type, request.key),
    )


def _coordinator_node(ctx: RequestContext, key_type: int, key: str) -> dict[str, Any]:
    view = ctx.services.cluster
    error = ErrorCode.none
    message: str | None = None
    broker = None
    if key_type == GROUP_KEY and not allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP,
                                             key):
        error, message = ErrorCode.group_authorization_failed, "Group authorization failed."
    elif key_type == TRANSACTION_KEY and not allowed(
            ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key):
        error = ErrorCode.transactional_id_authorization_failed
        message = "Transactional Id authorization failed."
    elif key_type not in (GROUP_KEY, TRANSACTION_KEY):
        error, message = ErrorCode.invalid_request, f"unsupported key type {key_type}"
    else:
        # Kafka: the coordinator's endpoint on this request's listener, else not available
        broker = broker_on(view, view.coordinator(key_type, key).leader, ctx.session.listener)
        if broker is None:
            error = ErrorCode.coordinator_not_available
            message = "The coordinator is not available."
    return {
        "node_id": -1 if broker is None else broker.node_id,
        "host": "" if broker is None else broker.host,
        "port": -1 if broker is None else broker.port,
        "error_code": error,
        "error_message": message,
    }
