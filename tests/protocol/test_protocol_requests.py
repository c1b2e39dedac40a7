"""Requests: golden bytes written from NATIVE-PROTOCOL.md, round trips, malformed input."""

import zlib

import pytest

from protocol import (
    AclBinding,
    AclBindingFilter,
    AlterConfigRequest,
    CommitOffsetRequest,
    CreateAclsRequest,
    CreateTopicRequest,
    DeleteAclsRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    DescribeAclsRequest,
    DescribeConfigRequest,
    DescribeListenersRequest,
    ErrorCode,
    FetchItem,
    FetchOffsetRequest,
    FetchRequest,
    HandshakeRequest,
    MetadataRequest,
    MultiFetchRequest,
    MultiProduceRequest,
    OffsetsRequest,
    ProduceItem,
    ProduceRequest,
    ProtocolError,
    RequestType,
    SaslAuthenticateRequest,
    encode_request,
    parse_request,
)


def h(text: str) -> bytes:
    return bytes.fromhex("".join(text.split()))


# A real magic-0 message (offset 0, key null, value "hi"): the codec passes it through unparsed.
MESSAGE = h("0000000000000000 00000010 fd6ebddb 00 00 ffffffff 00000002 6869")

# (request, frame on the wire): every byte below is written out by hand from the spec.
GOLDEN = [
    (ProduceRequest("test", 0, MESSAGE),
     h("0000002c 0000 0004 74657374 00000000 0000001c") + MESSAGE),
    (FetchRequest("test", 1, 42, 1048576, 500),
     h("0000001c 0001 0004 74657374 00000001 000000000000002a 00100000 000001f4")),
    (MultiFetchRequest((FetchItem("a", 0, 0, 100), FetchItem("b", 1, 7, 200))),
     h("0000002a 0002 0002"
       "0001 61 00000000 0000000000000000 00000064"
       "0001 62 00000001 0000000000000007 000000c8")),
    (MultiProduceRequest((ProduceItem("a", 0, b"\x01\x02"), ProduceItem("b", 3, b""))),
     h("0000001c 0003 0002"
       "0001 61 00000000 00000002 0102"
       "0001 62 00000003 00000000")),
    (OffsetsRequest("t", 0, -2, 1),
     h("00000015 0004 0001 74 00000000 fffffffffffffffe 00000001")),
    (CreateTopicRequest("t", 3, (("a", "b"), ("c", None))),
     h("00000016 0005 0001 74 00000003 0002 0001 61 0001 62 0001 63 ffff")),
    (DeleteTopicRequest("t"), h("00000005 0006 0001 74")),
    (MetadataRequest(("a", "bc")), h("0000000b 0007 0002 0001 61 0002 6263")),
    (MetadataRequest(()), h("00000004 0007 0000")),
    (DescribeConfigRequest("t"), h("00000005 0008 0001 74")),
    (AlterConfigRequest("t", (("retention.ms", None),)),
     h("00000017 0009 0001 74 0001 000c 726574656e74696f6e2e6d73 ffff")),
    (DeleteRecordsRequest("t", 0, -1), h("00000011 000a 0001 74 00000000 ffffffffffffffff")),
    (CommitOffsetRequest("g", "t", 2, 99, "m"),
     h("00000017 000b 0001 67 0001 74 00000002 0000000000000063 0001 6d")),
    (CommitOffsetRequest("g", "t", 2, 99, None),
     h("00000016 000b 0001 67 0001 74 00000002 0000000000000063 ffff")),
    (FetchOffsetRequest("g", "t", 2), h("0000000c 000c 0001 67 0001 74 00000002")),
    (HandshakeRequest(2, "cli"), h("00000009 000d 0002 0003 636c69")),
    (HandshakeRequest(2, None), h("00000006 000d 0002 ffff")),
    (SaslAuthenticateRequest("PLAIN", b"\0u\0p"),
     h("00000011 000e 0005 504c41494e 00000004 00750070")),
    (DescribeAclsRequest(2, "t", 3, None, None, 1, 1), h("0000000d 0081 02 000174 03 ffff ffff 01 01")),
    (CreateAclsRequest([AclBinding(2, "t", 3, "User:a", "*", 3, 3)]),
     h("00000016 0082 0001 02 000174 03 0006 557365723a61 00012a 03 03")),
    (DeleteAclsRequest([AclBindingFilter(2, "t")]), h("0000000f 0083 0001 02 000174 01 ffff ffff 01 01")),
    (DescribeListenersRequest(), h("00000002 00a0")),
]
IDS = [f"{req.TYPE.name}-{i}" for i, (req, _) in enumerate(GOLDEN)]

# Version 2: FETCH and METADATA end with one int8 more; every other body is version 1's.
GOLDEN_V2 = [
    (FetchRequest("test", 1, 42, 1048576, 500, 1),
     h("0000001d 0001 0004 74657374 00000001 000000000000002a 00100000 000001f4 01")),
    (MetadataRequest(("a",), True), h("00000008 0007 0001 0001 61 01")),
    (MetadataRequest((), False), h("00000005 0007 0000 00")),
    *[(req, wire) for req, wire in GOLDEN if req.TYPE not in (RequestType.FETCH, RequestType.METADATA)],
]


@pytest.mark.parametrize("req,wire", GOLDEN_V2, ids=[f"{r.TYPE.name}-{i}" for i, (r, _) in enumerate(GOLDEN_V2)])
def test_v2_encode_and_parse_match_golden(req, wire):
    assert encode_request(req, 2) == wire
    assert parse_request(wire[4:], 2) == req
    for cut in range(len(wire) - 4):
        with pytest.raises(ProtocolError):
            parse_request(wire[4:4 + cut], 2)


def test_v1_bytes_are_unchanged_by_the_v2_fields():
    """A version-1 frame never carries the version-2 fields: they keep their version-1 meaning."""
    assert encode_request(FetchRequest("test", 1, 42, 1048576, 500, 1)) == GOLDEN[1][1]
    assert encode_request(MetadataRequest(("a", "bc"), True)) == h("0000000b 0007 0002 0001 61 0002 6263")
    assert parse_request(GOLDEN[1][1][4:]).isolation_level == 0
    assert parse_request(h("0007 0000")).allow_auto_topic_creation is False
    with pytest.raises(ProtocolError):  # a version-1 body is a truncated version-2 one
        parse_request(GOLDEN[1][1][4:], 2)


def test_message_crc_is_real():
    assert zlib.crc32(MESSAGE[16:]) == 0xFD6EBDDB


def test_every_type_has_a_golden_frame():
    assert {req.TYPE for req, _ in GOLDEN} == set(RequestType)


@pytest.mark.parametrize("req,wire", GOLDEN, ids=IDS)
def test_encode_matches_golden(req, wire):
    assert encode_request(req) == wire
    assert int.from_bytes(wire[:4], "big") == len(wire) - 4


@pytest.mark.parametrize("req,wire", GOLDEN, ids=IDS)
def test_parse_golden(req, wire):
    parsed = parse_request(wire[4:])
    assert parsed == req
    assert type(parsed) is type(req)
    assert RequestType(int.from_bytes(wire[4:6], "big")) == parsed.TYPE


@pytest.mark.parametrize("req,wire", GOLDEN, ids=IDS)
def test_every_strict_prefix_is_truncated(req, wire):
    frame = wire[4:]
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError) as e:
            parse_request(frame[:cut])
        assert e.value.code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("req,wire", GOLDEN, ids=IDS)
def test_trailing_bytes_rejected(req, wire):
    with pytest.raises(ProtocolError) as e:
        parse_request(wire[4:] + b"\x00")
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert "trailing" in str(e.value)


def test_message_set_is_a_zero_copy_view():
    frame = bytearray(encode_request(ProduceRequest("t", 0, MESSAGE))[4:])
    req = parse_request(frame)
    assert isinstance(req.message_set, memoryview)
    assert req.message_set.obj is frame
    assert bytes(req.message_set) == MESSAGE
    multi = parse_request(encode_request(MultiProduceRequest([ProduceItem("t", 0, MESSAGE)]))[4:])
    assert isinstance(multi.items[0].message_set, memoryview)


def test_parse_accepts_bytes_bytearray_memoryview():
    wire = encode_request(FetchRequest("t", 0, 1, 2, 3))[4:]
    for buf in (wire, bytearray(wire), memoryview(wire), memoryview(b"xx" + wire)[2:]):
        assert parse_request(buf) == FetchRequest("t", 0, 1, 2, 3)


def test_encode_accepts_memoryview_message_set():
    ms = memoryview(b"..." + MESSAGE)[3:]
    assert encode_request(ProduceRequest("test", 0, ms)) == GOLDEN[0][1]


def test_collections_are_normalised_to_tuples():
    assert MetadataRequest(["a"]).topics == ("a",)
    assert CreateTopicRequest("t", 1, [["k", "v"]]).configs == (("k", "v"),)
    assert AlterConfigRequest("t", {"k": None}.items()).configs == (("k", None),)
    assert MultiFetchRequest([FetchItem("t", 0, 0, 1)]).items == (FetchItem("t", 0, 0, 1),)


def test_unicode_names_round_trip():
    req = CommitOffsetRequest("grüppe", "tøpic", 0, 1, "métadonnée ✓")
    assert parse_request(encode_request(req)[4:]) == req


# ---- malformed bodies: each must be INVALID_REQUEST ----

BAD = {
    "empty frame": "",
    "one byte": "00",
    "unknown type": "0063",
    "unknown negative type": "ffff",
    "type 15": "000f 0001 74",
    "handshake truncated": "000d 0002 0003 6162",
    "sasl authSize past end": "000e 0001 50 00000009 0102",
    "topic invalid utf-8": "0006 0001 ff",
    "topic overlong utf-8": "0006 0002 c0af",
    "topic lone surrogate": "0006 0003 eda080",
    "topic null": "0006 ffff",
    "topic length -2": "0006 fffe",
    "topic length past end": "0006 0005 7474",
    "produce setSize negative": "0000 0001 74 00000000 ffffffff",
    "produce setSize past end": "0000 0001 74 00000000 00000003 0102",
    "produce setSize short of the end": "0000 0001 74 00000000 00000001 0102",
    "fetch truncated": "0001 0001 74 00000000 0000000000000000 00000064 0000",
    "multifetch count negative": "0002 ffff",
    "multifetch count too big": "0002 0002 0001 61 00000000 0000000000000000 00000064",
    "multiproduce count negative": "0003 ffff",
    "multiproduce setSize negative": "0003 0001 0001 61 00000000 ffffffff",
    "multiproduce setSize past end": "0003 0001 0001 61 00000000 00000009 0102",
    "multiproduce setSize swallows next item": "0003 0002 0001 61 00000000 00000002 0102",
    "metadata count negative": "0007 ffff",
    "metadata topic null": "0007 0001 ffff",
    "create configCount negative": "0005 0001 74 00000001 ffff",
    "create config key null": "0005 0001 74 00000001 0001 ffff 0001 76",
    "create config value length -2": "0005 0001 74 00000001 0001 0001 6b fffe",
    "alter count negative": "0009 0001 74 ffff",
    "alter config key invalid utf-8": "0009 0001 74 0001 0001 80 ffff",
    "commit group null": "000b ffff 0001 74 00000000 0000000000000000 ffff",
    "commit metadata length -3": "000b 0001 67 0001 74 00000000 0000000000000000 fffd",
    "fetch_offset topic null": "000c 0001 67 ffff 00000000",
    "delete_records truncated": "000a 0001 74 00000000 00000000",
}


@pytest.mark.parametrize("hexframe", BAD.values(), ids=BAD.keys())
def test_malformed_request(hexframe):
    with pytest.raises(ProtocolError) as e:
        parse_request(h(hexframe))
    assert e.value.code == ErrorCode.INVALID_REQUEST
    assert isinstance(e.value.message, str) and e.value.message


def test_nulls_where_allowed():
    assert parse_request(h("0009 0001 74 0001 0001 6b ffff")) == AlterConfigRequest("t", [("k", None)])
    assert parse_request(h("0005 0001 74 00000001 0001 0001 6b ffff")) == \
        CreateTopicRequest("t", 1, [("k", None)])
    assert parse_request(h("000b 0001 67 0001 74 00000000 0000000000000000 ffff")).metadata is None


def test_empty_strings_and_sets_are_syntactically_fine():
    # Names are judged by the broker (INVALID_TOPIC_EXCEPTION), sets by storage.
    assert parse_request(h("0000 0000 00000000 00000000")) == ProduceRequest("", 0, b"")
    assert parse_request(h("0002 0000")) == MultiFetchRequest(())
    assert parse_request(h("0003 0000")) == MultiProduceRequest(())


# ---- encoder: caller mistakes are ValueError ----

@pytest.mark.parametrize("req", [
    DeleteTopicRequest(None),
    FetchRequest("t", 2**31, 0, 1, 0),
    FetchRequest("t", 0, 2**63, 1, 0),
    DeleteTopicRequest("x" * 32768),
    DeleteTopicRequest("\ud800"),
    MetadataRequest(["t"] * 32768),
    CommitOffsetRequest(None, "t", 0, 0),
    CreateTopicRequest("t", 1, [(None, "v")]),
])
def test_encode_rejects_unrepresentable_values(req):
    with pytest.raises(ValueError):
        encode_request(req)


def test_encode_rejects_non_requests():
    with pytest.raises(TypeError):
        encode_request(object())


def test_longest_string_fits():
    req = DeleteTopicRequest("x" * 32767)
    assert parse_request(encode_request(req)[4:]) == req
