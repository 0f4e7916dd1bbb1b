"""ApiVersions (key 18): the version ranges this broker serves."""

from __future__ import annotations

from typing import Any

from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0

from oncelog.broker.api import SUPPORTED, RequestContext, handles
from oncelog.coordinator.transaction import MAX_TRANSACTION_VERSION, TRANSACTION_VERSION_FEATURE
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
    """The version ranges, and from v3 the features (tagged fields), as Kafka 4.4 gives them:
    ``transaction.version`` supported 0..2 (left out below v4, where a feature whose
    minimum is 0 is omitted) and finalized at the configured level (min = max = level;
    absent at level 0)."""
    mod = response_module(versions.API_VERSIONS, ctx.api_version)
    keys = tuple(
        make(mod.ApiVersion, api_key=key, min_version=low, max_version=high)
        for key, (low, high) in sorted(SUPPORTED.items())
    )
    features: dict[str, Any] = {}
    if ctx.api_version >= 3:
        coordinator = ctx.services.transactions
        level = coordinator.transaction_version
        supported = []
        if ctx.api_version >= 4:
            supported.append(make(mod.SupportedFeatureKey, name=TRANSACTION_VERSION_FEATURE,
                                  min_version=0, max_version=MAX_TRANSACTION_VERSION))
        finalized = []
        if level > 0:
            finalized.append(make(mod.FinalizedFeatureKey, name=TRANSACTION_VERSION_FEATURE,
                                  min_version_level=level, max_version_level=level))
        features = {
            "supported_features": tuple(supported),
            "finalized_features_epoch": coordinator.features_epoch,
            "finalized_features": tuple(finalized),
        }
    return make(
        mod.ApiVersionsResponse,
        error_code=ErrorCode.none,
        api_keys=keys,
        throttle_time=0,
        **features,
    )
