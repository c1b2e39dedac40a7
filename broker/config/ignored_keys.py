"""Kafka broker keys that Strata accepts without reading them.

A Kafka `server.properties` (the stock `config/server.properties` or
`config/kraft/server.properties`) names settings that mean nothing on one node
(replication, the KRaft controller quorum, ZooKeeper) or that Strata does not
serve. `broker/config/broker_config.py` asks `ignored_reason(key, value)` about every key it
does not read: a reason means "accepted, logged once as ignored"; None means the
key is unknown (a warning, or an error under `--strict`). Keys whose value
would change what a Kafka broker does on one node (a replication factor other
than 1, a node id other than 0) raise InvalidConfigError naming the key.

A key that `broker/config/keys.py` reads (its KEYS table) is never asked about here,
so a key listed below that a later change implements simply starts being read.
"""

from __future__ import annotations

from kafka_format.errors import InvalidConfigError

NODE_ID = 0  # the node id Metadata announces (broker/kafka/apis.py NODE_ID)

SINGLE_NODE = "one node: Strata has no replication"
CONTROLLER = "one node: Strata has no KRaft controller quorum"
ZOOKEEPER = "Strata has no ZooKeeper"
NETWORK = "Strata serves every connection on one event loop"
LISTENERS = "the listeners come from host.name, port and kafka.port"

# Keys taken as they are, with the reason logged.
IGNORED: dict[str, str] = {
    "process.roles": CONTROLLER,
    "inter.broker.listener.name": SINGLE_NODE,
    "inter.broker.protocol.version": SINGLE_NODE,
    "security.inter.broker.protocol": SINGLE_NODE,
    "sasl.mechanism.inter.broker.protocol": SINGLE_NODE,
    "num.replica.fetchers": SINGLE_NODE,
    "replica.lag.time.max.ms": SINGLE_NODE,
    "replica.fetch.max.bytes": SINGLE_NODE,
    "unclean.leader.election.enable": SINGLE_NODE,
    "auto.leader.rebalance.enable": SINGLE_NODE,
    "leader.imbalance.check.interval.seconds": SINGLE_NODE,
    "leader.imbalance.per.broker.percentage": SINGLE_NODE,
    "broker.rack": SINGLE_NODE,
    "listeners": LISTENERS,
    "listener.security.protocol.map": LISTENERS,
    "num.network.threads": NETWORK,
    "socket.send.buffer.bytes": NETWORK,
    "socket.receive.buffer.bytes": NETWORK,
    "socket.listen.backlog.size": NETWORK,
    "delete.topic.enable": "topics can always be deleted",
    "group.coordinator.rebalance.protocols": "both group protocols are always served",
    "metadata.log.dir": CONTROLLER,
}
# Key prefixes taken as they are.
IGNORED_PREFIXES: dict[str, str] = {
    "controller.": CONTROLLER,
    "metadata.log.": CONTROLLER,
    "zookeeper.": ZOOKEEPER,
    "replica.": SINGLE_NODE,
    "share.coordinator.": "share groups are not served",
}
# Keys whose only meaningful value on one node is 1 (Kafka's min.insync.replicas, too:
# with one copy, acks=all can never wait for more).
MUST_BE_ONE: tuple[str, ...] = (
    "default.replication.factor",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "share.coordinator.state.topic.replication.factor",
    "share.coordinator.state.topic.min.isr",
    "min.insync.replicas",
)
# Node ids: Strata is node 0; -1 is Kafka's "not set" (broker.id: generate one).
NODE_IDS: dict[str, tuple[int, ...]] = {"broker.id": (NODE_ID, -1), "node.id": (NODE_ID, -1)}


def _int(key: str, value: str, origin: str) -> int:
    try:
        return int(str(value).strip())
    except ValueError:
        raise InvalidConfigError(f"{key}: {value!r} is not a valid int ({origin})") from None


def ignored_reason(key: str, value: str, origin: str) -> str | None:
    """Why `key` is accepted without effect, or None when Strata does not know it.

    Raises InvalidConfigError when the value asks for more than one node."""
    if key in MUST_BE_ONE:
        if _int(key, value, origin) != 1:
            raise InvalidConfigError(
                f"{key}: {str(value).strip()} is not supported: Strata is a single node that keeps one copy "
                f"of each partition, so it must be 1 ({origin})")
        return SINGLE_NODE
    if key in NODE_IDS:
        if _int(key, value, origin) not in NODE_IDS[key]:
            raise InvalidConfigError(
                f"{key}: {str(value).strip()} is not supported: Strata is a single node with id {NODE_ID}, "
                f"so it must be {NODE_ID} ({origin})")
        return f"one node: Strata is node {NODE_ID}"
    if key in IGNORED:
        return IGNORED[key]
    for prefix, reason in IGNORED_PREFIXES.items():
        if key.startswith(prefix):
            return reason
    return None


def without_controller_listeners(listeners: str, controller_names: str) -> tuple[str, list[str]]:
    """`listeners` with the entries named in `controller_names` (KRaft's
    controller.listener.names) left out, and the entries left out."""
    names = {n.strip().upper() for n in controller_names.split(",") if n.strip()}
    kept: list[str] = []
    dropped: list[str] = []
    for entry in (e.strip() for e in listeners.split(",")):
        if not entry:
            continue
        name = entry.partition("://")[0].strip().upper()
        (dropped if name in names else kept).append(entry)
    return ",".join(kept), dropped
