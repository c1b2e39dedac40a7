"""ApiVersions (every version, KIP-511 for unknown ones).

Contract: answers the versions `KafkaApis.supported()` lists; a version the
broker does not know is answered v0 with UNSUPPORTED_VERSION
(`unsupported_api_versions`, called by apis.py before decoding).
"""

from __future__ import annotations

from kio.index import load_response_schema

from . import codec
from .apis import ApiKey
from .codec import make, nested
from .core_api import CoreApiBase, E


class ApiVersionsApi(CoreApiBase):
    """ApiVersions."""

    def _api_keys(self, response_class: type) -> tuple:
        key_class = nested(response_class, "api_keys")
        return tuple(make(key_class, api_key=k, min_version=lo, max_version=hi)
                     for k, lo, hi in self.apis.supported())

    async def api_versions(self, req, ctx):
        return make(ctx.response_class, error_code=E.none, api_keys=self._api_keys(ctx.response_class),
                    throttle_time=0)

    def unsupported_api_versions(self, correlation_id: int) -> bytes:
        """KIP-511: an ApiVersions version the broker does not know is answered v0
        with UNSUPPORTED_VERSION and the supported versions (header v0)."""
        response_class = load_response_schema(ApiKey.API_VERSIONS, 0)
        response = make(response_class, error_code=E.unsupported_version,
                        api_keys=self._api_keys(response_class))
        return codec.encode_response(correlation_id, response)
