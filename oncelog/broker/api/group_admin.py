"""Consumer-group administration: ListGroups (16), DescribeGroups (15), DeleteGroups (42).

Thin, as the rest of the group APIs (``oncelog.broker.api.group``): ask
``ctx.services.groups`` (a GroupCoordinator), build the version's response.

Authorization as Kafka's KafkaApis: ListGroups lists every group to a principal with
Describe on the Cluster, else only the groups it may Describe (nobody is refused, nothing
is audited); DescribeGroups answers GROUP_AUTHORIZATION_FAILED (state, protocol type and
protocol empty) for a group the principal may not Describe, DeleteGroups for one it may not
Delete; only the others reach the coordinator.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.api.authorized import OMITTED, group_operations
from oncelog.broker.authz import allowed, allowed_names, cluster_allowed
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType


@handles(versions.LIST_GROUPS, 0, 5)
async def handle_list_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.LIST_GROUPS, ctx.api_version)
    types_filter = {t.lower() for t in getattr(request, "types_filter", ())}
    coordinator = ctx.services.groups
    listed = coordinator.list_groups(getattr(request, "states_filter", ()))
    if not cluster_allowed(ctx, AclOperation.DESCRIBE, audit=False):
        listed = [g for g in listed
                  if allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id,
                             audit=False)]
    # Kafka lists the groups loaded so far and says whether some partition still loads.
    error = ErrorCode.coordinator_load_in_progress if coordinator.loading else ErrorCode.none
    groups = tuple(
        make(
            mod.ListedGroup,
            group_id=g.group_id,
            protocol_type=g.protocol_type,
            group_state=g.state,
            group_type=g.group_type,
        )
        for g in listed
        if not types_filter or g.group_type in types_filter
    )
    return make(mod.ListGroupsResponse, throttle_time=0, error_code=error, groups=groups)


@handles(versions.DESCRIBE_GROUPS, 0, 6)
async def handle_describe_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DESCRIBE_GROUPS, ctx.api_version)
    names = list(request.groups)
    describable = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, names)
    described = {d.group_id: d for d in ctx.services.groups.describe_groups(
        [name for name in names if name in describable])}
    with_operations = bool(getattr(request, "include_authorized_operations", False))
    groups = []
    for name in names:
        if name not in describable:
            groups.append(make(
                mod.DescribedGroup, error_code=ErrorCode.group_authorization_failed,
                error_message=None, group_id=name, group_state="", protocol_type="",
                protocol_data="", members=(), authorized_operations=OMITTED))
            continue
        d = described[name]
        error, message = d.error, None
        if error == ErrorCode.group_id_not_found:
            if ctx.api_version >= 6:
                message = f"group {d.group_id} not found"
            else:
                error = ErrorCode.none  # before v6 an unknown group is described as Dead
        members = tuple(
            make(
                mod.DescribedGroupMember,
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata,
                member_assignment=m.assignment,
            )
            for m in d.members
        )
        groups.append(
            make(
                mod.DescribedGroup,
                error_code=error,
                error_message=message,
                group_id=d.group_id,
                group_state=d.state,
                protocol_type=d.protocol_type,
                protocol_data=d.protocol,
                members=members,
                authorized_operations=group_operations(with_operations, ctx, d.group_id),
            )
        )
    return make(mod.DescribeGroupsResponse, throttle_time=0, groups=tuple(groups))


@handles(versions.DELETE_GROUPS, 0, 2)
async def handle_delete_groups(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DELETE_GROUPS, ctx.api_version)
    names = list(request.groups_names)
    deletable = allowed_names(ctx, AclOperation.DELETE, ResourceType.GROUP, names)
    errors = ctx.services.groups.delete_groups([name for name in names if name in deletable])
    results = tuple(
        make(mod.DeletableGroupResult, group_id=name,
             error_code=errors[name] if name in deletable
             else ErrorCode.group_authorization_failed)
        for name in names)
    return make(mod.DeleteGroupsResponse, throttle_time=0, results=results)
