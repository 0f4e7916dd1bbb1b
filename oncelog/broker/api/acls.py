"""DescribeAcls, CreateAcls and DeleteAcls (v1-3, the versions Kafka 4.x serves), as
Kafka's AclApis answers them:

- their own authorization first: Describe on the Cluster for DescribeAcls, Alter on the
  Cluster for CreateAcls / DeleteAcls; refused -> CLUSTER_AUTHORIZATION_FAILED (the
  top-level error of DescribeAcls, every creation's and every filter's error otherwise);
- no authorizer configured -> SECURITY_DISABLED, the same way;
- a binding Kafka refuses to create (unknown or ANY resource type / operation / permission,
  a pattern type other than LITERAL or PREFIXED, an empty name, a Cluster resource not named
  ``kafka-cluster``) -> INVALID_REQUEST for that creation only; a filter with an UNKNOWN
  element -> INVALID_REQUEST (DescribeAcls: top level; DeleteAcls: that filter).
"""

from __future__ import annotations

import logging
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import cluster_allowed
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclBinding, AclBindingFilter, AclError, AclOperation

log = logging.getLogger(__name__)

NO_AUTHORIZER = "No Authorizer is configured on the broker"


def _refusal(ctx: RequestContext, operation: AclOperation, api: str
             ) -> tuple[ErrorCode, str] | None:
    """The error every entry gets before any work (or None to go on)."""
    if not cluster_allowed(ctx, operation):
        return ErrorCode.cluster_authorization_failed, f"Request {api} is not authorized."
    if ctx.services.authorizer is None or ctx.services.acls is None:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return None


def _filter(entry: Any, pattern_type: int) -> AclBindingFilter:
    return AclBindingFilter.of(entry.resource_type_filter, entry.resource_name_filter,
                               pattern_type, entry.principal_filter, entry.host_filter,
                               entry.operation, entry.permission_type)


@handles(versions.DESCRIBE_ACLS, 1, 3)
async def handle_describe_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DESCRIBE_ACLS, ctx.api_version)

    def answer(code: ErrorCode, message: str | None, resources: tuple[Any, ...]) -> Any:
        return make(mod.DescribeAclsResponse, throttle_time=0, error_code=code,
                    error_message=message, resources=resources)

    refused = _refusal(ctx, AclOperation.DESCRIBE, "DescribeAcls")
    if refused is not None:
        return answer(*refused, ())
    assert ctx.services.acls is not None
    wanted = _filter(request, request.pattern_type_filter)
    try:
        wanted.validate()
    except AclError as exc:
        return answer(ErrorCode.invalid_request, str(exc), ())
    by_pattern: dict[Any, list[Any]] = {}
    for binding in sorted(b for b in ctx.services.acls.current() if wanted.matches(b)):
        e = binding.entry
        by_pattern.setdefault(binding.pattern, []).append(make(
            mod.AclDescription, principal=e.principal, host=e.host, operation=int(e.operation),
            permission_type=int(e.permission)))
    resources = tuple(
        make(mod.DescribeAclsResource, resource_type=int(p.resource_type), resource_name=p.name,
             pattern_type=int(p.pattern_type), acls=tuple(acls))
        for p, acls in by_pattern.items())
    return answer(ErrorCode.none, None, resources)


@handles(versions.CREATE_ACLS, 1, 3)
async def handle_create_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.CREATE_ACLS, ctx.api_version)

    def result(code: ErrorCode = ErrorCode.none, message: str | None = None) -> Any:
        return make(mod.AclCreationResult, error_code=code, error_message=message)

    refused = _refusal(ctx, AclOperation.ALTER, "CreateAcls")
    if refused is not None:
        return make(mod.CreateAclsResponse, throttle_time=0,
                    results=tuple(result(*refused) for _ in request.creations))
    assert ctx.services.acls is not None
    results, valid = [], []
    for c in request.creations:
        binding = AclBinding.of(c.resource_type, c.resource_name, c.resource_pattern_type,
                                c.principal, c.host, c.operation, c.permission_type)
        try:
            binding.validate()
        except AclError as exc:
            results.append(result(ErrorCode.invalid_request, str(exc)))
            continue
        valid.append(binding)
        results.append(result())
    if valid:
        await ctx.services.acls.create(valid)
        for binding in valid:
            log.info("ACL created by %s: %s", ctx.session.principal, binding)
    return make(mod.CreateAclsResponse, throttle_time=0, results=tuple(results))


@handles(versions.DELETE_ACLS, 1, 3)
async def handle_delete_acls(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DELETE_ACLS, ctx.api_version)

    def result(code: ErrorCode, message: str | None, matching: tuple[Any, ...] = ()) -> Any:
        return make(mod.DeleteAclsFilterResult, error_code=code, error_message=message,
                    matching_acls=matching)

    refused = _refusal(ctx, AclOperation.ALTER, "DeleteAcls")
    if refused is not None:
        return make(mod.DeleteAclsResponse, throttle_time=0,
                    filter_results=tuple(result(*refused) for _ in request.filters))
    assert ctx.services.acls is not None
    errors: dict[int, str] = {}
    filters = []
    for index, entry in enumerate(request.filters):
        wanted = _filter(entry, entry.pattern_type_filter)
        try:
            wanted.validate()
        except AclError as exc:
            errors[index] = str(exc)
            continue
        filters.append(wanted)
    deleted = iter(await ctx.services.acls.delete(filters) if filters else [])
    results = []
    for index in range(len(request.filters)):
        if index in errors:
            results.append(result(ErrorCode.invalid_request, errors[index]))
            continue
        matching = next(deleted)
        for binding in matching:
            log.info("ACL deleted by %s: %s", ctx.session.principal, binding)
        results.append(result(ErrorCode.none, None, tuple(
            make(mod.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                 resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
                 pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal,
                 host=b.entry.host, operation=int(b.entry.operation),
                 permission_type=int(b.entry.permission))
            for b in matching)))
    return make(mod.DeleteAclsResponse, throttle_time=0, filter_results=tuple(results))
