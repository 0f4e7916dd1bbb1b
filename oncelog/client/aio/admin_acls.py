"""The asyncio admin client's ACLs: CreateAcls, DescribeAcls and DeleteAcls, as Kafka's
Admin offers them (``createAcls``, ``describeAcls``, ``deleteAcls``), with the binding and
filter types of oncelog.security.acl."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oncelog.client.aio.admin_types import AdminBase
from oncelog.client.errors import KafkaClientError, error_for
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api
from oncelog.security.acl import AclBinding, AclBindingFilter


def _filter_fields(f: AclBindingFilter) -> dict[str, object]:
    return {"resource_type_filter": int(f.resource_type), "resource_name_filter": f.name,
            "pattern_type_filter": int(f.pattern_type), "principal_filter": f.principal,
            "host_filter": f.host, "operation": int(f.operation),
            "permission_type": int(f.permission)}


class AclAdmin(AdminBase):
    """ACLs; mixed into ``AIOAdmin``."""

    async def create_acls(self, bindings: Iterable[AclBinding]
                          ) -> dict[AclBinding, KafkaClientError | None]:
        """Each binding's outcome: None for success, else its error."""
        wanted = list(bindings)
        conn = await self.client.any_connection()
        version = conn.version(api.CREATE_ACLS)
        response = await conn.send(request(api.CREATE_ACLS, version, creations=tuple(
            nested(api.CREATE_ACLS, version, "AclCreation",
                   resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
                   resource_pattern_type=int(b.pattern.pattern_type),
                   principal=b.entry.principal, host=b.entry.host,
                   operation=int(b.entry.operation), permission_type=int(b.entry.permission))
            for b in wanted)))
        return {b: None if r.error_code == ErrorCode.none
                else error_for(r.error_code, r.error_message or "CreateAcls")
                for b, r in zip(wanted, response.results, strict=True)}

    async def describe_acls(self, flt: AclBindingFilter | None = None) -> list[AclBinding]:
        """The bindings the filter matches (default: every binding)."""
        f = flt or AclBindingFilter()
        conn = await self.client.any_connection()
        version = conn.version(api.DESCRIBE_ACLS)
        response = await conn.send(request(api.DESCRIBE_ACLS, version, **_filter_fields(f)))
        if response.error_code != ErrorCode.none:
            raise error_for(response.error_code, response.error_message or "DescribeAcls")
        return [AclBinding.of(r.resource_type, r.resource_name, r.pattern_type, a.principal,
                              a.host, a.operation, a.permission_type)
                for r in response.resources for a in r.acls]

    async def delete_acls(self, filters: Sequence[AclBindingFilter]
                          ) -> list[list[AclBinding] | KafkaClientError]:
        """Per filter, the bindings it deleted, or its error."""
        conn = await self.client.any_connection()
        version = conn.version(api.DELETE_ACLS)
        response = await conn.send(request(api.DELETE_ACLS, version, filters=tuple(
            nested(api.DELETE_ACLS, version, "DeleteAclsFilter", **_filter_fields(f))
            for f in filters)))
        results: list[list[AclBinding] | KafkaClientError] = []
        for r in response.filter_results:
            if r.error_code != ErrorCode.none:
                results.append(error_for(r.error_code, r.error_message or "DeleteAcls"))
                continue
            results.append([AclBinding.of(m.resource_type, m.resource_name, m.pattern_type,
                                          m.principal, m.host, m.operation, m.permission_type)
                            for m in r.matching_acls])
        return results
