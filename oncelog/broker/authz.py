"""The one question request handlers ask: may this request's principal do ``operation`` on
a resource? ``allowed(ctx, operation, resource_type, name)`` answers it from the broker's
authorizer (always True when none is configured, as Kafka without
``authorizer.class.name``) and writes the audit line of a denial: principal, operation,
resource, client host (Kafka's ``kafka.authorizer.logger``; never a secret).

``audit=False`` is for questions that only filter or describe (authorized operations,
hiding topics from Metadata), which Kafka logs at TRACE only.

``allowed_names`` is Kafka's ``AuthHelper.filterByAuthorized``: the names of a request's
resources (each asked once) that may be acted on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from oncelog.broker.api import RequestContext
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

audit_log = logging.getLogger("oncelog.authorizer")


def allowed(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
            name: str, *, audit: bool = True) -> bool:
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return True
    if authorizer.authorize(ctx.session, operation, resource_type, name):
        return True
    if audit:
        audit_log.info(
            "Principal = %s is Denied operation = %s from host = %s on resource = %s:%s:%s "
            "(api key %d, client id %s)", ctx.session.principal, operation.name,
            ctx.session.client_host, resource_type.name, "LITERAL", name, ctx.api_key,
            ctx.client_id)
    else:
        audit_log.debug("Principal = %s is Denied operation = %s on resource = %s:%s",
                        ctx.session.principal, operation.name, resource_type.name, name)
    return False


def cluster_allowed(ctx: RequestContext, operation: AclOperation, *, audit: bool = True) -> bool:
    """``allowed`` on the Cluster resource (``kafka-cluster``)."""
    return allowed(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, audit=audit)


def allowed_on_any(ctx: RequestContext, operation: AclOperation,
                   resource_type: ResourceType) -> bool:
    """Whether the principal may do ``operation`` on at least one resource of the type
    (Kafka's ``authorizeByResourceType``: an idempotent producer's "Write on any topic").
    It writes no audit line, as Kafka's default implementation of it does not."""
    authorizer = ctx.services.authorizer
    return authorizer is None or authorizer.authorize_any(ctx.session, operation,
                                                          resource_type)


def allowed_names(ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  names: Iterable[str], *, audit: bool = True) -> frozenset[str]:
    """The distinct ``names`` this request's principal may do ``operation`` on."""
    return frozenset(name for name in dict.fromkeys(names)
                     if allowed(ctx, operation, resource_type, name, audit=audit))
