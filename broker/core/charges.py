"""Client quotas as both protocols charge them (the quotas themselves:
broker/quotas.py).

The charge rule, once for both protocols: a produce or fetch request is charged
once, after its handler ran, with its record bytes and its handler's time
(`throttle` kind produce or fetch): a produce (Kafka Produce, native PRODUCE and
MULTIPRODUCE) its record batches' bytes, as Kafka's produce quota counted the
bytes appended; a fetch (Kafka Fetch, native FETCH and MULTIFETCH) the record
bytes it answers (Kafka's fetch quota counts the whole response; the framing
around the records is not counted). Any other request is charged its handler's
time (kind request) while a request_percentage quota is set.
A throttled fetch is answered empty (KIP-219) and its bytes are taken back
(Kafka's unrecordQuotaSensor). Mutations (CreateTopics, CreatePartitions,
DeleteTopics; native CREATE_TOPIC, DELETE_TOPIC) count partitions against
controller_mutation_rate (`mutation_quota`, `mutation_throttle`). A throttled
request's connection mutes itself that long once its reply is out (KIP-219).
"""

from __future__ import annotations

from ..listeners import ConnectionContext
from ..quotas import MUTATION, ClientQuotas, MutationQuota


class QuotaCharges:
    """The client quotas both protocols charge (the module's doc); `quotas` is None
    while the broker runs without them."""

    def __init__(self, quotas: ClientQuotas | None = None):
        self.quotas = quotas

    @property
    def request_quotas(self) -> bool:
        """Whether any `request_percentage` quota is set: only then do the listeners
        time their handlers (Kafka records request time only while quotas are on)."""
        quotas = self.quotas
        return quotas is not None and quotas.request_quotas

    def throttle(self, connection: ConnectionContext, kind: str, client_id: str | None,
                 amount: float, handler_seconds: float = 0.0) -> int:
        """Charge one request (`kind` produce or fetch, `amount` its bytes, with the
        time its handler ran; or `kind` request, `amount` its handler's seconds)
        against the client's quotas; the throttle time in ms (0: none), the larger
        of the byte-rate and the request-time throttle, as Kafka's KafkaApis."""
        quotas = self.quotas
        if quotas is None:
            return 0
        principal = connection.principal
        throttle = quotas.throttle_ms(kind, principal, client_id, amount)
        if kind != "request" and quotas.request_quotas:
            throttle = max(throttle, quotas.throttle_ms("request", principal, client_id, handler_seconds))
        if throttle and kind == "fetch":
            quotas.unrecord(kind, principal, client_id, amount)
        if throttle:
            connection.throttle_ms = max(connection.throttle_ms, throttle)
        return throttle

    def mutation_quota(self, connection: ConnectionContext, client_id: str | None, *,
                       strict: bool) -> MutationQuota:
        """The controller_mutation_rate quota of one CreateTopics / CreatePartitions /
        DeleteTopics (native CREATE_TOPIC / DELETE_TOPIC) request: its `record` counts
        each topic's partitions as the topic changes (strict: refusing the topic with
        ThrottlingQuotaExceededError over the quota); `mutation_throttle` then gives
        the request's throttle time."""
        return MutationQuota(self.quotas, connection.principal, client_id, strict)

    def mutation_throttle(self, connection: ConnectionContext, quota: MutationQuota) -> int:
        """The throttle time (ms) to answer a request whose mutations `quota` counted,
        whatever the request's version (Kafka's sendResponseMaybeThrottleWithControllerQuota)."""
        throttle = quota.throttle_ms()
        if throttle and self.quotas is not None:
            self.quotas.count_throttle(MUTATION, throttle)
            connection.throttle_ms = max(connection.throttle_ms, throttle)
        return throttle

    def ip_connection_quota(self, ip: str) -> float | None:
        """The `connection_creation_rate` quota of an IP (broker/connection_rates.py), None for none."""
        quotas = self.quotas
        return quotas.ip_quota(ip) if quotas is not None else None

    def fetch_budget(self, connection: ConnectionContext, client_id: str | None, budget: int) -> int:
        """A fetch's byte budget under the client's consumer quota: at most what the
        quota window allows (Kafka's getMaxValueInQuotaWindow)."""
        quotas = self.quotas
        if quotas is None or not quotas.active:
            return budget
        limit = quotas.max_fetch_bytes(connection.principal, client_id)
        return budget if limit is None else min(budget, limit)
