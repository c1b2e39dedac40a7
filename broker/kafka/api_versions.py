"""ApiVersions (every version, KIP-511 for unknown ones).

Contract: answers the versions `KafkaApis.supported()` lists; a version the
broker does not know is answered v0 with UNSUPPORTED_VERSION
(`unsupported_api_versions`, called by apis.py before decoding).
"""

from __future__ import annotations

import dataclasses

from kio.index import load_response_schema

from . import codec
from .codec import make, nested
from .core_api import CoreApiBase, E
from .request_types import ApiKey


def _api_keys(response_class: type, supported: list[tuple[int, int, int]]) -> tuple:
    key_class = nested(response_class, "api_keys")
    return tuple(make(key_class, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in supported)


# The features (KIP-584) Strata finalizes, as Kafka 4.2 names them: share.version 1 while
# the share-group APIs are served (KIP-932).
SHARE_VERSION = ("share.version", 1)
FEATURES_EPOCH = 1


def _features(response_class: type, supported: list[tuple[int, int, int]]) -> dict:
    """ApiVersions v3+'s feature fields (SupportedFeatures, FinalizedFeatures)."""
    if "supported_features" not in {f.name for f in dataclasses.fields(response_class)}:
        return {}
    features = [SHARE_VERSION] if any(k == ApiKey.SHARE_FETCH for k, _, _ in supported) else []
    supported_class = nested(response_class, "supported_features")
    finalized_class = nested(response_class, "finalized_features")
    return dict(
        supported_features=tuple(make(supported_class, name=n, min_version=0, max_version=level)
                                 for n, level in features),
        finalized_features_epoch=FEATURES_EPOCH if features else -1,
        finalized_features=tuple(make(finalized_class, name=n, max_version_level=level, min_version_level=level)
                                 for n, level in features))


class ApiVersionsApi(CoreApiBase):
    """ApiVersions."""

    async def api_versions(self, req, ctx):
        supported = self.apis.supported()
        return make(ctx.response_class, error_code=E.none,
                    api_keys=_api_keys(ctx.response_class, supported), throttle_time=0,
                    **_features(ctx.response_class, supported))


def unsupported_api_versions(supported: list[tuple[int, int, int]], correlation_id: int) -> bytes:
    """KIP-511: an ApiVersions version the broker does not know is answered v0
    with UNSUPPORTED_VERSION and the `supported` versions (header v0)."""
    response_class = load_response_schema(ApiKey.API_VERSIONS, 0)
    response = make(response_class, error_code=E.unsupported_version, api_keys=_api_keys(response_class, supported))
    return codec.encode_response(correlation_id, response)
