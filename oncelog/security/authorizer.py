"""The authorization seam: handlers ask ``authorizer.authorize(session, operation,
resource_type, name)``. ``BrokerContext.authorizer`` is None when no authorizer is
configured (Kafka without ``authorizer.class.name``): everything is allowed. The ACL
authorizer (acl bindings, super users, ``allow.everyone.if.no.acl.found``) implements it."""

from __future__ import annotations

from typing import Protocol

from oncelog.security.acl import AclOperation
from oncelog.security.principal import Session


class Authorizer(Protocol):
    def authorize(self, session: Session, operation: AclOperation, resource_type: int,
                  name: str) -> bool:
        """``resource_type`` is Kafka's ResourceType code (TOPIC 2, GROUP 3, CLUSTER 4,
        TRANSACTIONAL_ID 5); the cluster's name is ``kafka-cluster``."""
        ...

    def authorize_any(self, session: Session, operation: AclOperation,
                      resource_type: int) -> bool:
        """Whether ``operation`` is allowed on at least one resource of the type (Kafka's
        ``authorizeByResourceType``)."""
        ...
