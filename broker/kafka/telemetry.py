"""GetTelemetrySubscriptions (API 71, version 0, KIP-714): "no subscription", as a
Kafka broker with no client-metrics subscription configured answers: no requested
metrics (so the client pushes nothing) and Kafka's default push interval, 5 minutes,
after which the client asks again. A client without an instance id (null or the
zero UUID) is given a new random one, as Kafka's ClientMetricsManager does. The
subscription id is Kafka's: CRC32C of the metric list's text and the push interval,
XOR the instance id's Java hash code. PushTelemetry is not served: with no metrics
requested a client has nothing to push.
"""

from __future__ import annotations

import uuid

from crc32c import crc32c

from .codec import make
from .request_types import ApiKey

PUSH_INTERVAL_MS = 300_000  # Kafka's ClientMetricsConfigs.DEFAULT_INTERVAL_MS
TELEMETRY_MAX_BYTES = 1_048_576  # Kafka's telemetry.max.bytes default
ACCEPTED_COMPRESSION = (4, 3, 1, 2)  # zstd, lz4, gzip, snappy: Kafka's order
RESERVED_IDS = (uuid.UUID(int=0), uuid.UUID(int=1))  # Kafka's Uuid.RESERVED


def _java_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def subscription_id(instance_id: uuid.UUID, metrics: tuple[str, ...] = ()) -> int:
    """Kafka's computeSubscriptionId: crc32c(str(metrics) + interval) ^ Uuid.hashCode()."""
    text = "[" + ", ".join(metrics) + "]" + str(PUSH_INTERVAL_MS)
    hi, lo = instance_id.int >> 64, instance_id.int & (2**64 - 1)
    hilo = hi ^ lo
    java_hash = _java_int(hilo >> 32) ^ _java_int(hilo)
    return _java_int(crc32c(text.encode()) ^ java_hash)


def new_instance_id() -> uuid.UUID:
    while True:
        value = uuid.uuid4()
        if value not in RESERVED_IDS:
            return value


class TelemetryHandlers:
    def __init__(self, apis):
        self.apis = apis

    async def get_telemetry_subscriptions(self, req, ctx):
        instance_id = req.client_instance_id
        if instance_id is None or instance_id == RESERVED_IDS[0]:
            instance_id = new_instance_id()
        return make(ctx.response_class, throttle_time=0, error_code=0, client_instance_id=instance_id,
                    subscription_id=subscription_id(instance_id),
                    accepted_compression_types=ACCEPTED_COMPRESSION,
                    push_interval=PUSH_INTERVAL_MS, telemetry_max_bytes=TELEMETRY_MAX_BYTES,
                    delta_temporality=True, requested_metrics=())


def register(apis) -> None:
    apis.register(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, TelemetryHandlers(apis).get_telemetry_subscriptions, 0, 0)
