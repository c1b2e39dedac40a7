"""SASL on the Kafka listener: SaslHandshake (17, v0-1), SaslAuthenticate (36, v0-2),
and the SCRAM credential APIs DescribeUserScramCredentials (50, v0) and
AlterUserScramCredentials (51, v0).

- SaslHandshake chooses the mechanism for the connection's SaslSession
  (broker/security/sasl.py); a mechanism the listener does not enable answers
  UNSUPPORTED_SASL_MECHANISM with the enabled list and closes, as Kafka. Versions
  0 and 1 are advertised (librdkafka's feature check asks for 0), but the tokens
  must travel in SaslAuthenticate: Kafka's pre-1.0 raw token frames are not
  served (every current client sends SaslAuthenticate when the broker offers it).
- SaslAuthenticate runs one round; success answers the reply bytes and (v1+)
  the session lifetime (connections.max.reauth.ms, 0 = none); a failure answers
  SASL_AUTHENTICATION_FAILED with its message after
  connection.failed.authentication.delay.ms and closes the connection. Either
  request on a listener without SASL answers ILLEGAL_SASL_STATE and closes.
  Re-authentication (KIP-368) is a new SaslHandshake + SaslAuthenticate on the
  same connection.
- The gate (KafkaApis): on a SASL listener, before success (or once the session
  expired) only ApiVersions, SaslHandshake and SaslAuthenticate are served;
  anything else closes the connection, as Kafka.
- AlterUserScramCredentials takes what the client computed (salt, salted
  password, iterations) and stores StoredKey/ServerKey, never the salted password
  (broker/security/credentials.py), as Kafka: per user, its changes apply whole
  or not at all; an unknown mechanism is UNSUPPORTED_SASL_MECHANISM, an empty
  name, salt or salted password, or iterations outside 4096..16384
  UNACCEPTABLE_CREDENTIAL, deleting a credential that does not exist
  RESOURCE_NOT_FOUND, a user's mechanism named twice DUPLICATE_RESOURCE.
  DescribeUserScramCredentials lists mechanisms and iterations (every user with
  a credential when users is null or empty, as Kafka); a user without any is RESOURCE_NOT_FOUND, a
  user named twice DUPLICATE_RESOURCE. With an authorizer they need DESCRIBE /
  ALTER on the cluster (else CLUSTER_AUTHORIZATION_FAILED), as Kafka.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from broker.net.request_handlers import CloseAfterReply

from ..security.authorizer import Op
from ..security.errors import SaslAuthenticationFailedError
from ..security.sasl import sasl_failure_delay
from ..security.scram import BY_TYPE, MAX_ITERATIONS, MIN_ITERATIONS, credential_from_salted
from . import codec
from .allowed import allowed_cluster
from .codec import make, nested
from .request_types import ApiKey

UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
KAFKA_STORAGE_ERROR = 56
RESOURCE_NOT_FOUND = 91
DUPLICATE_RESOURCE = 92
UNACCEPTABLE_CREDENTIAL = 93


class SaslHandlers:
    def __init__(self, apis):
        self.apis = apis
        self._alter_lock = asyncio.Lock()

    @staticmethod
    def _close_with(ctx, response) -> CloseAfterReply:
        return CloseAfterReply([codec.encode_response(ctx.correlation_id, response)])

    # ---- authentication ----

    async def sasl_handshake(self, req, ctx):
        R = ctx.response_class
        sasl = ctx.connection.sasl
        if sasl is None:
            raise self._close_with(ctx, make(R, error_code=ILLEGAL_SASL_STATE, mechanisms=()))
        try:
            sasl.handshake(req.mechanism)
        except Exception as e:
            code = getattr(e, "code", ILLEGAL_SASL_STATE)
            sasl.authenticator.failed(ctx.connection, req.mechanism, str(e))
            raise self._close_with(ctx, make(R, error_code=int(code), mechanisms=sasl.mechanisms)) from None
        return make(R, error_code=0, mechanisms=sasl.mechanisms)

    async def sasl_authenticate(self, req, ctx):
        R = ctx.response_class
        sasl = ctx.connection.sasl
        if sasl is None or (sasl.mechanism is None and sasl.exchange is None):
            raise self._close_with(ctx, make(R, error_code=ILLEGAL_SASL_STATE, auth_bytes=b"",
                                             error_message="SaslAuthenticate without a SaslHandshake",
                                             session_lifetime=timedelta(0)))
        mechanism = sasl.exchange.mechanism.name if sasl.exchange is not None else sasl.mechanism
        try:
            reply, lifetime = sasl.authenticate(mechanism, bytes(req.auth_bytes))
        except Exception as e:
            message = str(e) if isinstance(e, SaslAuthenticationFailedError) else f"Authentication failed: {e}"
            await sasl_failure_delay(sasl)
            raise self._close_with(ctx, make(R, error_code=SASL_AUTHENTICATION_FAILED, error_message=message,
                                             auth_bytes=b"", session_lifetime=timedelta(0))) from None
        return make(R, error_code=0, error_message=None, auth_bytes=reply,
                    session_lifetime=timedelta(milliseconds=lifetime))

    # ---- SCRAM credentials ----

    def _store(self):
        store = self.apis.authenticator.store if self.apis.authenticator is not None else None
        if store is None:
            raise RuntimeError("the SCRAM credential store is not open")
        return store

    async def describe_user_scram_credentials(self, req, ctx):
        R = ctx.response_class
        Result, Info = nested(R, "results"), nested(nested(R, "results"), "credential_infos")
        described = self._store().describe()
        results = []
        if not req.users:
            names = sorted(described)
            duplicates: set[str] = set()
        else:
            names = [u.name for u in req.users]
            duplicates = {n for n in names if names.count(n) > 1}
            names = list(dict.fromkeys(names))
        for name in names:
            if name in duplicates:
                results.append(make(Result, user=name, error_code=DUPLICATE_RESOURCE, credential_infos=(),
                                    error_message="Cannot describe SCRAM credentials for the same user twice "
                                                  "in a single request"))
            elif name not in described:
                results.append(make(Result, user=name, error_code=RESOURCE_NOT_FOUND, credential_infos=(),
                                    error_message=f"Attempt to describe a user credential that does not exist: "
                                                  f"{name}"))
            else:
                infos = tuple(make(Info, mechanism=BY_NAME_TYPE[m], iterations=i) for m, i in described[name])
                results.append(make(Result, user=name, error_code=0, error_message=None, credential_infos=infos))
        return make(R, throttle_time=0, error_code=0, error_message=None, results=tuple(results))

    async def alter_user_scram_credentials(self, req, ctx):
        R = ctx.response_class
        Result = nested(R, "results")
        store = self._store()
        errors: dict[str, tuple[int, str]] = {}
        seen: dict[tuple[str, int], int] = {}
        users: list[str] = []
        for op in (*req.deletions, *req.upsertions):
            users.append(op.name)
            seen[(op.name, op.mechanism)] = seen.get((op.name, op.mechanism), 0) + 1

        def refuse(user: str, code: int, message: str) -> None:
            errors.setdefault(user, (code, message))

        for (user, _mechanism), count in seen.items():
            if count > 1:
                refuse(user, DUPLICATE_RESOURCE, "A user credential cannot be altered twice in the same request")
        upsertions, deletions = [], []
        for op in req.deletions:
            refusal = _deletion_refusal(op, store)
            if refusal is not None:
                refuse(op.name, *refusal)
            else:
                deletions.append((op.name, BY_TYPE[op.mechanism].name))
        for op in req.upsertions:
            refusal = _upsertion_refusal(op)
            if refusal is not None:
                refuse(op.name, *refusal)
            else:
                mechanism = BY_TYPE[op.mechanism]
                upsertions.append((op.name, mechanism.name,
                                   credential_from_salted(mechanism, bytes(op.salt), bytes(op.salted_password),
                                                          op.iterations)))
        upsertions = [u for u in upsertions if u[0] not in errors]
        deletions = [d for d in deletions if d[0] not in errors]
        if upsertions or deletions:
            async with self._alter_lock:
                try:
                    await self.apis.blocking(store.apply, upsertions, deletions)
                except OSError as e:
                    for failed in {u[0] for u in upsertions} | {d[0] for d in deletions}:
                        refuse(failed, KAFKA_STORAGE_ERROR, f"cannot write the SCRAM credentials: {e.strerror or e}")
        results = []
        for user in dict.fromkeys(users):
            code, message = errors.get(user, (0, None))
            results.append(make(Result, user=user, error_code=code, error_message=message))
        return make(R, throttle_time=0, results=tuple(results))


def _alteration_refusal(op) -> tuple[int, str] | None:
    """(error code, message) when a deletion or upsertion names no user or an unknown mechanism."""
    if not op.name:
        return UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if op.mechanism not in BY_TYPE:
        return UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
    return None


def _deletion_refusal(op, store) -> tuple[int, str] | None:
    refusal = _alteration_refusal(op)
    if refusal is None and store.lookup(BY_TYPE[op.mechanism].name, op.name) is None:
        return RESOURCE_NOT_FOUND, "Attempt to delete a user credential that does not exist"
    return refusal


def _upsertion_refusal(op) -> tuple[int, str] | None:
    refusal = _alteration_refusal(op)
    if refusal is not None:
        return refusal
    if op.iterations < MIN_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, f"Too few iterations: at least {MIN_ITERATIONS}"
    if op.iterations > MAX_ITERATIONS:
        return UNACCEPTABLE_CREDENTIAL, f"Too many iterations: at most {MAX_ITERATIONS}"
    if not op.salt or not op.salted_password:
        return UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
    return None


BY_NAME_TYPE = {m.name: m.type for m in BY_TYPE.values()}
CLUSTER_AUTHORIZATION_FAILED = 31


def _describe_scram_guard(req, ctx):
    """With an authorizer: DESCRIBE on the cluster, as Kafka (broker/kafka/acls.py)."""
    if allowed_cluster(ctx, Op.DESCRIBE):
        return None
    # Each named user gets the error (librdkafka aborts on a top-level error with no
    # result per user); describing every user gets the top-level error alone, as Kafka.
    Result = nested(ctx.response_class, "results")
    message = "Cluster authorization failed."
    top = CLUSTER_AUTHORIZATION_FAILED if req.users is None else 0
    return make(ctx.response_class, throttle_time=0, error_code=top, error_message=message if top else None,
                results=tuple(make(Result, user=u.name, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=message,
                                   credential_infos=()) for u in req.users or ()))


def _alter_scram_guard(req, ctx):
    """With an authorizer: ALTER on the cluster, else every user CLUSTER_AUTHORIZATION_FAILED."""
    if allowed_cluster(ctx, Op.ALTER):
        return None
    Result = nested(ctx.response_class, "results")
    users = dict.fromkeys(op.name for op in (*req.deletions, *req.upsertions))
    return make(ctx.response_class, throttle_time=0, results=tuple(
        make(Result, user=user, error_code=CLUSTER_AUTHORIZATION_FAILED, error_message=None) for user in users))


def register(apis) -> None:
    handlers = SaslHandlers(apis)
    apis.register(ApiKey.SASL_HANDSHAKE, handlers.sasl_handshake, 0, 1)
    apis.register(ApiKey.SASL_AUTHENTICATE, handlers.sasl_authenticate, 0, 2)
    apis.register(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, handlers.describe_user_scram_credentials, 0, 0)
    apis.register(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, handlers.alter_user_scram_credentials, 0, 0)
    apis.guard(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, _describe_scram_guard)
    apis.guard(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, _alter_scram_guard)
