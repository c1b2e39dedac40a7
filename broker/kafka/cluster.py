"""DescribeCluster (API 60, versions 0-2): this one broker, as a KRaft broker answers it.

The broker is node 0 at the advertised address, never fenced, and the controller
id is its own (Kafka's brokers answer a live broker id). A request for the
controllers' endpoint (endpoint_type 2) is answered MISMATCHED_ENDPOINT_TYPE, an
unknown endpoint type UNSUPPORTED_ENDPOINT_TYPE, as Kafka's brokers do.
`cluster_authorized_operations` is filled in when asked (broker/kafka/authorized.py).
"""

from __future__ import annotations

from .authorized import CLUSTER_NAME, ResourceType, requested
from .codec import make, nested
from .request_types import ApiKey

BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2
MISMATCHED_ENDPOINT_TYPE = 114
UNSUPPORTED_ENDPOINT_TYPE = 115


class ClusterHandlers:
    def __init__(self, apis):
        self.apis = apis

    async def describe_cluster(self, req, ctx):
        R = ctx.response_class
        endpoint = getattr(req, "endpoint_type", BROKER_ENDPOINT)
        state = self.apis.state
        cluster_id = state.cluster_id if state is not None else ""
        if endpoint != BROKER_ENDPOINT:
            code = MISMATCHED_ENDPOINT_TYPE if endpoint == CONTROLLER_ENDPOINT else UNSUPPORTED_ENDPOINT_TYPE
            return make(R, throttle_time=0, error_code=code, endpoint_type=endpoint, cluster_id=cluster_id,
                        error_message=f"The request was sent to an endpoint of type BROKER, "
                                      f"but it asked for endpoint type {endpoint}",
                        controller_id=-1, brokers=())
        host, port = ctx.advertised
        node = self.apis.node_id
        broker = make(nested(R, "brokers"), broker_id=node, host=host, port=port,
                      rack=self.apis.config["broker.rack"], is_fenced=False)
        return make(R, throttle_time=0, error_code=0, error_message=None, endpoint_type=endpoint,
                    cluster_id=cluster_id, controller_id=node, brokers=(broker,),
                    cluster_authorized_operations=requested(req.include_cluster_authorized_operations,
                                                            ResourceType.CLUSTER, CLUSTER_NAME, ctx))


def register(apis) -> None:
    apis.register(ApiKey.DESCRIBE_CLUSTER, ClusterHandlers(apis).describe_cluster, 0, 2)
