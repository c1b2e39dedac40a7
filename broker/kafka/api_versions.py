"""ApiVersions (every version, KIP-511 for unknown ones).

Contract: answers the versions `KafkaApis.supported()` lists; a version the
broker does not know is answered v0 with UNSUPPORTED_VERSION
(`unsupported_api_versions`, called by apis.py before decoding).
"""

from __future__ import annotations

from kio.index import load_response_schema

from . import codec
from .codec import make, nested
from .core_api import CoreApiBase, E
from .request_types import ApiKey


def _api_keys(response_class: type, supported: list[tuple[int, int, int]]) -> tuple:
    key_class = nested(response_class, "api_keys")
    return tuple(make(key_class, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in supported)


class ApiVersionsApi(CoreApiBase):
    """ApiVersions."""

    async def api_versions(self, req, ctx):
        return make(ctx.response_class, error_code=E.none,
                    api_keys=_api_keys(ctx.response_class, self.apis.supported()), throttle_time=0)


def unsupported_api_versions(supported: list[tuple[int, int, int]], correlation_id: int) -> bytes:
    """KIP-511: an ApiVersions version the broker does not know is answered v0
    with UNSUPPORTED_VERSION and the `supported` versions (header v0)."""
    response_class = load_response_schema(ApiKey.API_VERSIONS, 0)
    response = make(response_class, error_code=E.unsupported_version, api_keys=_api_keys(response_class, supported))
    return codec.encode_response(correlation_id, response)
