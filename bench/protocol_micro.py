"""Micro-benchmark of the native codec: parse and build per request and response type.

    .venv/bin/python bench/protocol_micro.py [--runs 5] [--seconds 0.2] [--root DIR]

For every request type: `parse_request` of its frame and `encode_request` of its
value; for every response type: `parse_response` and `encode_response`. Then the
hand-written struct code that stays on the broker's hot path, each next to the
compiled layout doing the same work: `parse_produce` against `parse_request` of
the same PRODUCE, `produce_response` against `encode_response(ProduceResponse)`,
and the 6-byte frame header (`fetch_response_header`) against a compiled
`size:int32 | error:int16` layout. Small values (a 100-byte message set, three
partitions of metadata), so the figures are the codec's own per-call cost. Each
figure is the best of --runs timings of as many calls as fit in --seconds, in
microseconds per call. --root measures the `protocol` package of another
checkout (a before/after comparison on one machine, run back to back).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def cases(p):  # noqa: ANN001, ANN201 - the protocol module, loaded at run time
    ms = bytes(100)
    requests = [
        p.ProduceRequest("topic-a", 3, ms),
        p.FetchRequest("topic-a", 3, 12345, 1048576, 500),
        p.MultiFetchRequest([p.FetchItem("topic-a", i, 100, 65536) for i in range(3)]),
        p.MultiProduceRequest([p.ProduceItem("topic-a", i, ms) for i in range(3)]),
        p.OffsetsRequest("topic-a", 3, -1, 1),
        p.CreateTopicRequest("topic-a", 3, [("retention.ms", "1000"), ("cleanup.policy", None)]),
        p.DeleteTopicRequest("topic-a"),
        p.MetadataRequest(["topic-a", "topic-b"]),
        p.DescribeConfigRequest("topic-a"),
        p.AlterConfigRequest("topic-a", [("retention.ms", None)]),
        p.DeleteRecordsRequest("topic-a", 3, 100),
        p.CommitOffsetRequest("group", "topic-a", 3, 100, "meta"),
        p.FetchOffsetRequest("group", "topic-a", 3),
    ]
    none = p.ErrorCode.NONE
    responses = [
        (p.RequestType.PRODUCE, p.ProduceResponse(none, 100, -1)),
        (p.RequestType.FETCH, p.FetchResponse(none, ms)),
        (p.RequestType.MULTIFETCH, p.MultiFetchResponse(none, [(none, ms)] * 3)),
        (p.RequestType.MULTIPRODUCE, p.MultiProduceResponse(none, [(none, 100, -1)] * 3)),
        (p.RequestType.OFFSETS, p.OffsetsResponse(none, [100])),
        (p.RequestType.CREATE_TOPIC, p.EmptyResponse(none)),
        (p.RequestType.METADATA, p.MetadataResponse(none, [p.TopicMetadata(
            "topic-a", none, [p.PartitionMetadata(i, 0, 100) for i in range(3)])])),
        (p.RequestType.DESCRIBE_CONFIG, p.DescribeConfigResponse(none, [("retention.ms", "1000")] * 3)),
        (p.RequestType.DELETE_RECORDS, p.DeleteRecordsResponse(none, 100)),
        (p.RequestType.FETCH_OFFSET, p.FetchOffsetResponse(none, 100, "meta")),
    ]
    return requests, responses


def layout_header():  # noqa: ANN201
    """A callable building `size:int32 | error:int16` with a compiled construct layout, as
    encode_response would if the header were declared like the bodies (None before the layouts)."""
    try:
        from construct import Int16sb, Int32sb

        from protocol.wire import PartsStream, Record
    except ImportError:
        return None
    layout = Record(tuple, "size" / Int32sb, "error" / Int16sb).compile()

    def build() -> bytes:
        stream = PartsStream()
        layout.buildfunc((102, 0), stream, None)
        return b"".join(stream.parts)
    return build


def best_us(fn, seconds: float, runs: int) -> float:  # noqa: ANN001
    n = 1
    while True:  # calibrate: as many calls as fit in `seconds`
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4:
            n = max(1, int(n * seconds / elapsed))
            break
        n *= 4
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="best of N (default 5)")
    parser.add_argument("--seconds", type=float, default=0.2, help="time per run (default 0.2)")
    parser.add_argument("--root", default=ROOT, help="checkout whose protocol package to measure")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.root))
    import protocol as p

    requests, responses = cases(p)
    rows = []
    for req in requests:
        wire = p.encode_request(req)
        frame = wire[4:]
        rows.append((f"request  {req.TYPE.name}", best_us(lambda f=frame: p.parse_request(f), args.seconds, args.runs),
                     best_us(lambda r=req: p.encode_request(r), args.seconds, args.runs)))
    for rtype, resp in responses:
        frame = p.encode_response(resp)[4:]
        rows.append((f"response {rtype.name}",
                     best_us(lambda t=rtype, f=frame: p.parse_response(t, f), args.seconds, args.runs),
                     best_us(lambda r=resp: p.encode_response(r), args.seconds, args.runs)))
    t = lambda fn: best_us(fn, args.seconds, args.runs)  # noqa: E731
    produce = p.encode_request(requests[0])[4:]
    produced = p.ProduceResponse(p.ErrorCode.NONE, 100, -1)
    header = layout_header()
    hot = [("PRODUCE parse: parse_produce | parse_request", t(lambda: p.parse_produce(produce)),
            t(lambda: p.parse_request(produce))),
           ("PRODUCE answer: produce_response | encode_response", t(lambda: p.produce_response(100, -1)),
            t(lambda: p.encode_response(produced)))]
    if header is not None:
        hot.append(("6-byte header: fetch_response_header | layout", t(lambda: p.fetch_response_header(0, 100)),
                    t(header)))
    print(f"protocol package: {os.path.dirname(p.__file__)}")
    print(f"{'case':50} {'parse us':>9} {'build us':>9}")
    for name, parse_us, build_us in rows:
        print(f"{name:50} {parse_us:9.2f} {build_us:9.2f}")
    print(f"{'hot path: hand-written struct | compiled layout':50} {'struct us':>9} {'layout us':>9}")
    for name, struct_us, layout_us in hot:
        print(f"{name:50} {struct_us:9.2f} {layout_us:9.2f}  ({layout_us / struct_us:.1f}x)")


if __name__ == "__main__":
    main()
