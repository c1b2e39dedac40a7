"""Hypothesis round trips: encode -> frame -> parse gives back the value, for every type."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import (
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicRequest,
    DescribeConfigRequest,
    DescribeConfigResponse,
    EmptyResponse,
    ErrorCode,
    FetchItem,
    FetchOffsetRequest,
    FetchOffsetResponse,
    FetchRequest,
    FetchResponse,
    FetchResult,
    FrameDecoder,
    MetadataRequest,
    MetadataResponse,
    MultiFetchRequest,
    MultiFetchResponse,
    MultiProduceRequest,
    MultiProduceResponse,
    OffsetsRequest,
    OffsetsResponse,
    PartitionMetadata,
    ProduceItem,
    ProduceRequest,
    ProduceResponse,
    ProduceResult,
    ProtocolError,
    RequestType,
    TopicMetadata,
    encode_request,
    encode_response,
    multifetch_response_parts,
    parse_request,
    parse_response,
)

FEW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

i16 = st.integers(-2**15, 2**15 - 1)
i32 = st.integers(-2**31, 2**31 - 1)
i64 = st.integers(-2**63, 2**63 - 1)
name = st.text(max_size=12)
opt = st.none() | st.text(max_size=12)
blob = st.binary(max_size=64)
configs = st.lists(st.tuples(name, opt), max_size=4).map(tuple)
codes = st.sampled_from(list(ErrorCode))
small = lambda s: st.lists(s, max_size=4).map(tuple)  # noqa: E731

requests = st.one_of(
    st.builds(ProduceRequest, name, i32, blob),
    st.builds(FetchRequest, name, i32, i64, i32, i32),
    st.builds(MultiFetchRequest, small(st.builds(FetchItem, name, i32, i64, i32))),
    st.builds(MultiProduceRequest, small(st.builds(ProduceItem, name, i32, blob))),
    st.builds(OffsetsRequest, name, i32, i64, i32),
    st.builds(CreateTopicRequest, name, i32, configs),
    st.builds(DeleteTopicRequest, name),
    st.builds(MetadataRequest, small(name)),
    st.builds(DescribeConfigRequest, name),
    st.builds(AlterConfigRequest, name, configs),
    st.builds(DeleteRecordsRequest, name, i32, i64),
    st.builds(CommitOffsetRequest, name, name, i32, i64, opt),
    st.builds(FetchOffsetRequest, name, name, i32),
)

ok = st.just(ErrorCode.NONE)
responses = st.one_of(
    st.tuples(st.just(RequestType.PRODUCE), st.builds(ProduceResponse, ok, i64, i64)),
    st.tuples(st.just(RequestType.FETCH), st.builds(FetchResponse, ok, blob)),
    st.tuples(st.just(RequestType.MULTIFETCH),
              st.builds(MultiFetchResponse, ok, small(st.builds(FetchResult, codes, blob)))),
    st.tuples(st.just(RequestType.MULTIPRODUCE),
              st.builds(MultiProduceResponse, ok, small(st.builds(ProduceResult, codes, i64, i64)))),
    st.tuples(st.just(RequestType.OFFSETS), st.builds(OffsetsResponse, ok, small(i64))),
    st.tuples(st.sampled_from([RequestType.CREATE_TOPIC, RequestType.DELETE_TOPIC,
                               RequestType.ALTER_CONFIG, RequestType.COMMIT_OFFSET]),
              st.builds(EmptyResponse, ok)),
    st.tuples(st.just(RequestType.METADATA), st.builds(MetadataResponse, ok, small(
        st.builds(TopicMetadata, name, codes, small(st.builds(PartitionMetadata, i32, i64, i64)))))),
    st.tuples(st.just(RequestType.DESCRIBE_CONFIG), st.builds(DescribeConfigResponse, ok, configs)),
    st.tuples(st.just(RequestType.DELETE_RECORDS), st.builds(DeleteRecordsResponse, ok, i64)),
    st.tuples(st.just(RequestType.FETCH_OFFSET), st.builds(FetchOffsetResponse, ok, i64, opt)),
)


def _unframe(wire: bytes) -> bytes:
    assert int.from_bytes(wire[:4], "big") == len(wire) - 4
    return wire[4:]


@FEW
@given(requests)
def test_request_round_trip(req):
    assert parse_request(_unframe(encode_request(req))) == req


@FEW
@given(responses)
def test_response_round_trip(case):
    rtype, resp = case
    assert parse_response(rtype, _unframe(encode_response(resp))) == resp


@FEW
@given(st.lists(requests, min_size=1, max_size=5), st.lists(st.integers(1, 50), max_size=20))
def test_any_split_gives_the_same_frames(reqs, cuts):
    stream = b"".join(encode_request(r) for r in reqs)
    d, got, pos = FrameDecoder(), [], 0
    for n in cuts + [len(stream)]:
        d.feed(stream[pos:pos + n])
        pos += n
        got += [parse_request(f) for f in d.frames()]
    assert got == reqs


@FEW
@given(requests, st.data())
def test_truncation_never_escapes_as_another_exception(req, data):
    frame = encode_request(req)[4:]
    cut = data.draw(st.integers(0, len(frame) - 1))
    try:
        parse_request(frame[:cut])
    except ProtocolError as e:
        assert e.code == ErrorCode.INVALID_REQUEST
    else:
        raise AssertionError("a strict prefix parsed")


@FEW
@given(st.binary(max_size=40))
def test_garbage_raises_only_protocol_error(garbage):
    try:
        parse_request(garbage)
    except ProtocolError as e:
        assert e.code == ErrorCode.INVALID_REQUEST
    for rtype in RequestType:
        try:
            parse_response(rtype, garbage)
        except ProtocolError as e:
            assert e.code == ErrorCode.CORRUPT_MESSAGE


@FEW
@given(small(st.tuples(codes, blob)))
def test_multifetch_parts_match_the_encoder(items):
    items = [(e, b"" if e != ErrorCode.NONE else ms) for e, ms in items]
    top, headers = multifetch_response_parts([(e, len(ms)) for e, ms in items])
    wire = top + b"".join(hd + ms for hd, (_, ms) in zip(headers, items, strict=True))
    assert wire == encode_response(MultiFetchResponse(ErrorCode.NONE, items))


@FEW
@given(st.lists(st.binary(max_size=12), min_size=1, max_size=6), st.lists(st.integers(0, 9)))
def test_raw_frames_any_split(frames, cuts):
    """Frames of any length (0 and 1 included) come out in order under any split;
    short ones raise INVALID_REQUEST in their place and framing carries on."""
    stream = b"".join(len(f).to_bytes(4, "big") + f for f in frames)
    expected = [f if len(f) >= 2 else "short" for f in frames]
    d, got, pos = FrameDecoder(), [], 0

    def poll():
        while True:
            try:
                frame = d.next_frame()
            except ProtocolError as e:
                assert e.code == ErrorCode.INVALID_REQUEST
                got.append("short")
                continue
            if frame is None:
                return
            got.append(bytes(frame))

    for n in cuts + [len(stream)]:
        d.feed(stream[pos:pos + n])
        pos += n
        poll()
    assert got == expected
