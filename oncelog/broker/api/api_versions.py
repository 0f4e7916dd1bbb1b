"""ApiVersions (key 18): the version ranges this broker serves."""

from __future__ import annotations

from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0

from oncelog.broker.api import SUPPORTED, RequestContext, handles
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module


def unsupported_version_response() -> ApiVersionsResponseV0:
    """The v0-format answer to an ApiVersions version we do not serve (error 35)."""
    return ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=tuple(
            ApiVersionV0(api_key=key, min_version=low, max_version=high)  # type: ignore[arg-type]
            for key, (low, high) in sorted(SUPPORTED.items())
        ),
    )


@handles(versions.API_VERSIONS, 0, 4)
async def handle_api_versions(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.API_VERSIONS, ctx.api_version)
    keys = tuple(
        make(mod.ApiVersion, api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(SUPPORTED.items())
    )
    return make(
        mod.ApiVersionsResponse,
        error_code=ErrorCode.none,
        api_keys=keys,
        throttle_time=0,
    )
