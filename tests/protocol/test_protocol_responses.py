"""Responses: golden bytes from NATIVE-PROTOCOL.md, sendfile headers, round trips, malformed input."""

import pytest

from protocol import (
    AclBinding,
    DeleteAclsResponse,
    DeletedAcls,
    DeleteRecordsResponse,
    DescribeAclsResponse,
    DescribeConfigResponse,
    DescribeListenersResponse,
    EmptyResponse,
    ErrorCode,
    FetchOffsetResponse,
    FetchResponse,
    FetchResponseV2,
    FetchResult,
    HandshakeResponse,
    MetadataResponse,
    MultiFetchResponse,
    MultiProduceResponse,
    OffsetsResponse,
    PartitionMetadata,
    ProduceResponse,
    ProduceResult,
    ProtocolError,
    RequestType,
    SaslAuthenticateResponse,
    TopicMetadata,
    encode_response,
    error_response,
    fetch_response_header,
    fetch_v2_response_header,
    multifetch_response_parts,
    parse_response,
)

T = RequestType


def h(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


# (request type, response, frame on the wire), written out by hand from the spec.
ACL = AclBinding(2, "t", 3, "User:a", "*", 3, 3)  # TOPIC t LITERAL, User:a from *, READ ALLOW
GOLDEN = [
    (T.PRODUCE, ProduceResponse(ErrorCode.NONE, 5, -1),
     h("00000012 0000 0000000000000005 ffffffffffffffff")),
    (T.FETCH, FetchResponse(ErrorCode.NONE, b"abcdef"), h("00000008 0000 616263646566")),
    (T.FETCH, FetchResponse(ErrorCode.NONE, b""), h("00000002 0000")),
    # No count prefix: top header, then MessageSetSend after MessageSetSend.
    (T.MULTIFETCH,
     MultiFetchResponse(ErrorCode.NONE, (FetchResult(ErrorCode.NONE, b"xyz"),
                                         FetchResult(ErrorCode.OFFSET_OUT_OF_RANGE, b""))),
     h("00000011 0000  00000005 0000 78797a  00000002 0001")),
    (T.MULTIFETCH, MultiFetchResponse(ErrorCode.NONE, ()), h("00000002 0000")),
    # No count prefix: 18-byte items back to back.
    (T.MULTIPRODUCE,
     MultiProduceResponse(ErrorCode.NONE, (ProduceResult(ErrorCode.NONE, 10, -1),
                                           ProduceResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))),
     h("00000026 0000"
       "0000 000000000000000a ffffffffffffffff"
       "0003 ffffffffffffffff ffffffffffffffff")),
    (T.OFFSETS, OffsetsResponse(ErrorCode.NONE, (0, 100)),
     h("00000016 0000 00000002 0000000000000000 0000000000000064")),
    (T.OFFSETS, OffsetsResponse(ErrorCode.NONE, ()), h("00000006 0000 00000000")),
    (T.CREATE_TOPIC, EmptyResponse(ErrorCode.NONE), h("00000002 0000")),
    (T.DELETE_TOPIC, EmptyResponse(ErrorCode.NONE), h("00000002 0000")),
    (T.METADATA,
     MetadataResponse(ErrorCode.NONE, (
         TopicMetadata("a", ErrorCode.NONE, (PartitionMetadata(0, 0, 10),
                                             PartitionMetadata(1, 5, 7))),
         TopicMetadata("zz", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ()))),
     h("00000041 0000 00000002"
       "0001 61 0000 00000002"
       "00000000 0000000000000000 000000000000000a"
       "00000001 0000000000000005 0000000000000007"
       "0002 7a7a 0003 00000000")),
    (T.DESCRIBE_CONFIG, DescribeConfigResponse(ErrorCode.NONE, (("k", "v"), ("n", None))),
     h("0000000f 0000 0002 0001 6b 0001 76 0001 6e ffff")),
    (T.ALTER_CONFIG, EmptyResponse(ErrorCode.NONE), h("00000002 0000")),
    (T.DELETE_RECORDS, DeleteRecordsResponse(ErrorCode.NONE, 7),
     h("0000000a 0000 0000000000000007")),
    (T.COMMIT_OFFSET, EmptyResponse(ErrorCode.NONE), h("00000002 0000")),
    (T.FETCH_OFFSET, FetchOffsetResponse(ErrorCode.NONE, 99, "m"),
     h("0000000d 0000 0000000000000063 0001 6d")),
    (T.FETCH_OFFSET, FetchOffsetResponse(ErrorCode.NONE, -1, None),
     h("0000000c 0000 ffffffffffffffff ffff")),
    (T.HANDSHAKE, HandshakeResponse(ErrorCode.NONE, 2, ()), h("00000006 0000 0002 0000")),
    (T.HANDSHAKE, HandshakeResponse(ErrorCode.NONE, 2, ("PLAIN",)),
     h("0000000d 0000 0002 0001 0005 504c41494e")),
    (T.SASL_AUTHENTICATE, SaslAuthenticateResponse(ErrorCode.NONE, b"ok", 0),
     h("00000010 0000 00000002 6f6b 0000000000000000")),
    (T.DESCRIBE_ACLS, DescribeAclsResponse(ErrorCode.NONE, [ACL]),
     h("00000018 0000 00000001 02 000174 03 0006 557365723a61 00012a 03 03")),
    (T.CREATE_ACLS, EmptyResponse(ErrorCode.NONE), h("00000002 0000")),
    (T.DELETE_ACLS, DeleteAclsResponse(ErrorCode.NONE, [DeletedAcls((ACL,))]),
     h("0000001a 0000 0001 00000001 02 000174 03 0006 557365723a61 00012a 03 03")),
    (T.DESCRIBE_LISTENERS, DescribeListenersResponse(ErrorCode.NONE, [("native", "EXTERNAL", "SSL", "h", 19000)]),
     h("00000022 0000 0001 0006 6e6174697665 0008 45585445524e414c 0003 53534c 0001 68 00004a38")),
]
IDS = [f"{t.name}-{i}" for i, (t, _, _) in enumerate(GOLDEN)]

# Version 2: FETCH answers offsets and the aborted list before the set; errors carry a message.
GOLDEN_V2 = [
    (T.FETCH, FetchResponseV2(ErrorCode.NONE, 10, 10, 2, (), b"abc"),
     h("00000021 0000 000000000000000a 000000000000000a 0000000000000002 00000000 616263")),
    (T.FETCH, FetchResponseV2(ErrorCode.NONE, 10, 8, 0, ((7, 3),), b""),
     h("0000002e 0000 000000000000000a 0000000000000008 0000000000000000 00000001"
       "0000000000000007 0000000000000003")),
    (T.CREATE_TOPIC, EmptyResponse(ErrorCode.INVALID_CONFIG, "retention.ms: 'abc' is not a valid long"),
     h("0000002b 0028 0027") + b"retention.ms: 'abc' is not a valid long"),
    (T.FETCH, FetchResponseV2(ErrorCode.OFFSET_OUT_OF_RANGE, message="offset 9 is out of range"),
     h("0000001c 0001 0018") + b"offset 9 is out of range"),
    (T.PRODUCE, ProduceResponse(ErrorCode.CORRUPT_MESSAGE), h("00000004 0002 ffff")),
    (T.PRODUCE, ProduceResponse(ErrorCode.NONE, 5, -1), h("00000012 0000 0000000000000005 ffffffffffffffff")),
]


@pytest.mark.parametrize("rtype,resp,wire", GOLDEN_V2, ids=[f"{t.name}-{i}" for i, (t, _, _) in enumerate(GOLDEN_V2)])
def test_v2_encode_and_parse_match_golden(rtype, resp, wire):
    assert encode_response(resp, 2) == wire
    assert parse_response(rtype, wire[4:], 2) == resp


def test_v1_errors_stay_empty_whatever_the_message():
    resp = EmptyResponse(ErrorCode.INVALID_CONFIG, "retention.ms: 'abc' is not a valid long")
    assert encode_response(resp) == h("00000002 0028") == error_response(ErrorCode.INVALID_CONFIG, "why")
    assert parse_response(T.CREATE_TOPIC, h("0028")) == EmptyResponse(ErrorCode.INVALID_CONFIG)
    with pytest.raises(ProtocolError):  # a v2 message is a body version 1 does not allow
        parse_response(T.CREATE_TOPIC, h("0028 0001 78"))


def test_v2_error_message_is_cut_to_fit_a_str():
    frame = error_response(ErrorCode.INVALID_CONFIG, "é" * 20000, 2)
    parsed = parse_response(T.CREATE_TOPIC, frame[4:], 2)
    assert len(parsed.message.encode()) <= 32767 and set(parsed.message) == {"é"}


def test_fetch_v2_header_agrees_with_the_encoder():
    resp = FetchResponseV2(ErrorCode.NONE, 10, 8, 0, ((7, 3), (9, 5)), b"abcdef")
    assert fetch_v2_response_header(10, 8, 0, [(7, 3), (9, 5)], 6) + b"abcdef" == encode_response(resp, 2)


def test_every_type_has_a_golden_frame():
    assert {t for t, _, _ in GOLDEN} == set(RequestType)


@pytest.mark.parametrize("rtype,resp,wire", GOLDEN, ids=IDS)
def test_encode_matches_golden(rtype, resp, wire):
    assert encode_response(resp) == wire
    assert int.from_bytes(wire[:4], "big") == len(wire) - 4


@pytest.mark.parametrize("rtype,resp,wire", GOLDEN, ids=IDS)
def test_parse_golden(rtype, resp, wire):
    parsed = parse_response(rtype, wire[4:])
    assert parsed == resp
    assert type(parsed) is type(resp)


@pytest.mark.parametrize("rtype,resp,wire", GOLDEN, ids=IDS)
def test_every_strict_prefix_fails_or_is_a_shorter_fetch(rtype, resp, wire):
    frame = wire[4:]
    for cut in range(len(frame)):
        if cut >= 2 and rtype == T.FETCH:
            continue  # a FETCH body is the raw set: any length is well-formed
        if cut >= 2 and rtype in (T.MULTIFETCH, T.MULTIPRODUCE) and \
                frame[2:cut] in _item_boundaries(rtype, frame):
            continue  # the multi bodies end after any whole item
        with pytest.raises(ProtocolError) as e:
            parse_response(rtype, frame[:cut])
        assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def _item_boundaries(rtype, frame):
    body, out, pos = frame[2:], [b""], 0
    while pos < len(body):
        pos += 4 + int.from_bytes(body[pos:pos + 4], "big") if rtype == T.MULTIFETCH else 18
        out.append(body[:pos])
    return out


@pytest.mark.parametrize("rtype,resp,wire", GOLDEN, ids=IDS)
def test_trailing_bytes_rejected(rtype, resp, wire):
    if rtype == T.FETCH:
        return  # the message set runs to the end of the frame
    with pytest.raises(ProtocolError) as e:
        parse_response(rtype, wire[4:] + b"\x00")
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


# ---- top-level errors: empty body, neutral values ----

def test_error_response_golden():
    assert error_response(ErrorCode.INVALID_REQUEST) == h("00000002 002a")
    assert error_response(ErrorCode.UNKNOWN_SERVER_ERROR) == h("00000002 ffff")
    assert error_response(ErrorCode.KAFKA_STORAGE_ERROR) == h("00000002 0038")


@pytest.mark.parametrize("rtype,resp,wire", GOLDEN, ids=IDS)
def test_error_responses_have_empty_bodies(rtype, resp, wire):
    failed = type(resp)(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert encode_response(failed) == h("00000002 0003")
    assert parse_response(rtype, h("0003")) == failed


def test_error_response_values_are_neutral():
    assert parse_response(T.PRODUCE, h("0003")) == ProduceResponse(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
    assert parse_response(T.FETCH, h("0001")).message_set == b""
    assert parse_response(T.FETCH_OFFSET, h("0003")) == FetchOffsetResponse(3, -1, None)
    assert parse_response(T.METADATA, h("002a")).topics == ()


def test_error_with_a_body_is_corrupt():
    with pytest.raises(ProtocolError) as e:
        parse_response(T.PRODUCE, h("0003 0000000000000005 ffffffffffffffff"))
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


def test_error_in_body_wins_over_fields():
    # Whenever the top-level error is not NONE the body is empty, whatever the fields say.
    assert encode_response(ProduceResponse(ErrorCode.CORRUPT_MESSAGE, 5, 6)) == h("00000002 0002")


def test_unknown_error_codes_are_kept_as_ints():
    resp = parse_response(T.CREATE_TOPIC, h("0029"))  # 41: not in the table
    assert resp.error == 41 and not isinstance(resp.error, ErrorCode)
    assert isinstance(parse_response(T.CREATE_TOPIC, h("0024")).error, ErrorCode)


def test_parse_response_unknown_type():
    with pytest.raises(ValueError):
        parse_response(15, h("0000"))


# ---- sendfile helpers ----

def test_fetch_response_header():
    assert fetch_response_header(ErrorCode.NONE, 6) == h("00000008 0000")
    assert fetch_response_header(ErrorCode.NONE, 0) == h("00000002 0000")
    assert fetch_response_header(ErrorCode.OFFSET_OUT_OF_RANGE, 0) == h("00000002 0001")
    assert fetch_response_header(0, 6) + b"abcdef" == encode_response(FetchResponse(0, b"abcdef"))
    with pytest.raises(ValueError):
        fetch_response_header(ErrorCode.OFFSET_OUT_OF_RANGE, 5)
    with pytest.raises(ValueError):
        fetch_response_header(ErrorCode.NONE, -1)
    with pytest.raises(ValueError):
        fetch_response_header(ErrorCode.NONE, 2**31 - 2)


def test_multifetch_response_parts_golden():
    top, items = multifetch_response_parts([(ErrorCode.NONE, 3), (ErrorCode.OFFSET_OUT_OF_RANGE, 0)])
    assert top == h("00000011 0000")
    assert items == [h("00000005 0000"), h("00000002 0001")]
    wire = top + items[0] + b"xyz" + items[1]
    assert wire == GOLDEN[3][2]
    assert multifetch_response_parts([]) == (h("00000002 0000"), [])


def test_multifetch_response_parts_overflow():
    with pytest.raises(ValueError):
        multifetch_response_parts([(0, 2**30), (0, 2**30)])
    with pytest.raises(ValueError):
        multifetch_response_parts([(0, -1)])


def test_message_sets_are_zero_copy_views():
    frame = bytearray(encode_response(MultiFetchResponse(0, [(0, b"abc"), (0, b"de")]))[4:])
    resp = parse_response(T.MULTIFETCH, frame)
    assert all(isinstance(ms, memoryview) and ms.obj is frame for _, ms in resp.items)
    assert [bytes(ms) for _, ms in resp.items] == [b"abc", b"de"]
    fetch = parse_response(T.FETCH, frame)
    assert isinstance(fetch.message_set, memoryview) and fetch.message_set.obj is frame


def test_items_unpack_as_tuples():
    resp = MultiFetchResponse(0, [(0, b"a")])
    [(error, ms)] = resp.items
    assert (error, ms) == (0, b"a") and resp.items[0].message_set == b"a"
    [(error, base, lat)] = MultiProduceResponse(0, [(0, 4, -1)]).items
    assert (error, base, lat) == (0, 4, -1)


# ---- malformed bodies: CORRUPT_MESSAGE ----

BAD = {
    "empty frame": (T.PRODUCE, ""),
    "one byte": (T.CREATE_TOPIC, "00"),
    "multifetch item size 1": (T.MULTIFETCH, "0000 00000001 00"),
    "multifetch item size negative": (T.MULTIFETCH, "0000 ffffffff 0000"),
    "multifetch item past end": (T.MULTIFETCH, "0000 00000005 0000 78"),
    "multiproduce partial item": (T.MULTIPRODUCE, "0000 0000 0000000000000000"),
    "offsets count negative": (T.OFFSETS, "0000 ffffffff"),
    "offsets count too big": (T.OFFSETS, "0000 00000002 0000000000000000"),
    "metadata count negative": (T.METADATA, "0000 ffffffff"),
    "metadata topic null": (T.METADATA, "0000 00000001 ffff 0000 00000000"),
    "metadata topic invalid utf-8": (T.METADATA, "0000 00000001 0001 ff 0000 00000000"),
    "metadata partitions negative": (T.METADATA, "0000 00000001 0001 61 0000 ffffffff"),
    "describe count negative": (T.DESCRIBE_CONFIG, "0000 ffff"),
    "describe key null": (T.DESCRIBE_CONFIG, "0000 0001 ffff 0001 76"),
    "describe value length -2": (T.DESCRIBE_CONFIG, "0000 0001 0001 6b fffe"),
    "fetch_offset metadata length -2": (T.FETCH_OFFSET, "0000 0000000000000000 fffe"),
    "empty body expected": (T.COMMIT_OFFSET, "0000 00"),
}


@pytest.mark.parametrize("rtype,hexframe", BAD.values(), ids=BAD.keys())
def test_malformed_response(rtype, hexframe):
    with pytest.raises(ProtocolError) as e:
        parse_response(rtype, h(hexframe))
    assert e.value.code == ErrorCode.CORRUPT_MESSAGE


# ---- encoder: caller mistakes are ValueError ----

@pytest.mark.parametrize("resp", [
    ProduceResponse(0, 2**63, -1),
    MetadataResponse(0, [TopicMetadata(None, 0)]),
    MetadataResponse(0, [TopicMetadata("t", 0, [PartitionMetadata(2**31, 0, 0)])]),
    DescribeConfigResponse(0, [("k", "v")] * 32768),
    DescribeConfigResponse(0, [(None, "v")]),
    FetchOffsetResponse(0, 0, "x" * 32768),
])
def test_encode_rejects_unrepresentable_values(resp):
    with pytest.raises(ValueError):
        encode_response(resp)


def test_encode_rejects_non_responses():
    with pytest.raises(TypeError):
        encode_response(type("Fake", (), {"error": 0})())
