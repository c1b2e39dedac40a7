"""DescribeClientQuotas (API 48) and AlterClientQuotas (API 49), versions 0-1, over
the broker's one ClientQuotas (broker/core/quotas.py, on the partition service).

- Alter: each entry is checked on its own (an entity Kafka refuses, an unknown
  key, a value that is not positive or, for byte rates, not whole: INVALID_REQUEST
  with the reason, that entry changed in no way); the entries that pass are
  stored together (one file replacement) unless `validate_only`, and apply to the
  next request at once. `remove` drops a key; an entity left with no key is gone.
- Describe: the filter's components (entity type; match type 0 exact name, 1 the
  default, 2 any specified name) and `strict` (only entities of exactly those
  types), as Kafka's; a bad filter answers INVALID_REQUEST with the reason.
"""

from __future__ import annotations

from broker.core.quotas import ClientQuotas, Entity, entity_of
from kafka_format.errors import InvalidRequestError, StrataError

from .codec import make, nested
from .request_types import ApiKey


class ClientQuotaHandlers:
    def __init__(self, apis):
        self.apis = apis

    @property
    def quotas(self) -> ClientQuotas:
        quotas = self.apis.partitions.quotas
        if quotas is None:  # before the data directory is open: the broker is not ready
            raise InvalidRequestError("client quotas are not loaded yet")
        return quotas

    async def describe_client_quotas(self, req, ctx):
        R = ctx.response_class
        EntryR = nested(R, "entries")
        EntityR, ValueR = nested(EntryR, "entity"), nested(EntryR, "values")
        try:
            found = self.quotas.describe(((c.entity_type, int(c.match_type), c.match) for c in req.components),
                                         req.strict)
        except InvalidRequestError as e:
            return make(R, throttle_time=0, error_code=e.code, error_message=str(e), entries=None)
        entries = tuple(make(EntryR, entity=tuple(make(EntityR, entity_type=t, entity_name=n) for t, n in entity),
                             values=tuple(make(ValueR, key=k, value=v) for k, v in sorted(values.items())))
                        for entity, values in found)
        return make(R, throttle_time=0, error_code=0, error_message=None, entries=entries)

    async def alter_client_quotas(self, req, ctx):
        R = ctx.response_class
        EntryR = nested(R, "entries")
        EntityR = nested(EntryR, "entity")
        quotas = self.quotas
        changes: dict[Entity, dict[str, float]] = {}
        answers = []
        for entry in req.entries:
            pairs = tuple((e.entity_type, e.entity_name) for e in entry.entity)
            code, message = 0, None
            try:
                entity = entity_of(pairs)
                if entity in changes:
                    raise InvalidRequestError("the entity appears more than once in the request")
                changes[entity] = quotas.check(entity, ((op.key, None if op.remove else float(op.value))
                                                        for op in entry.ops))
            except InvalidRequestError as e:
                code, message = e.code, str(e)
            answers.append(make(EntryR, error_code=code, error_message=message,
                                entity=tuple(make(EntityR, entity_type=t, entity_name=n) for t, n in pairs)))
        try:
            await self.apis.blocking(lambda: quotas.alter(changes, validate_only=req.validate_only))
        except StrataError as e:  # the quotas file could not be written: nothing changed
            answers = [a if a.error_code else make(EntryR, error_code=e.code, error_message=str(e), entity=a.entity)
                       for a in answers]
        return make(R, throttle_time=0, entries=tuple(answers))


def register(apis) -> None:
    handlers = ClientQuotaHandlers(apis)
    apis.register(ApiKey.DESCRIBE_CLIENT_QUOTAS, handlers.describe_client_quotas, 0, 1)
    apis.register(ApiKey.ALTER_CLIENT_QUOTAS, handlers.alter_client_quotas, 0, 1)
