"""The construct declarations (requests.LAYOUTS, responses.LAYOUTS) against the spec table in
protocol/NATIVE.md: for every request type, the fields of the request body and of the response
body, with their names, types and order, and what repeats how often. Also: the compiled code
of each declaration agrees with the declaration run uncompiled."""

import re
from pathlib import Path

import pytest
from construct import FormatField, Rebuild, Renamed

from protocol import RequestType, requests, responses
from protocol.wire import (
    ErrorFieldType,
    FrameStream,
    Items,
    Length,
    MessageSet,
    PartsStream,
    Record,
    StrField,
    UntilEnd,
)

NATIVE_MD = Path(requests.__file__).with_name("NATIVE.md")
END = "(to the end of the frame)"
INTEGERS = {">b": "int8", ">h": "int16", ">l": "int32", ">q": "int64"}
AS_V1 = "as version 1"


# ---- the table ------------------------------------------------------------------------------

def table_rows() -> dict[int, tuple[str, str, str]]:
    """type number -> (name, request cell, response cell), from the table under "The wire in brief"."""
    rows = {}
    for line in NATIVE_MD.read_text().splitlines():
        m = re.match(r"\| (\d+) ([A-Z_]+) \| (.*) \| (.*) \|$", line)
        if m:
            rows[int(m.group(1))] = (m.group(2), m.group(3), m.group(4))
    return rows


def v2_rows() -> dict[int, tuple[str, str, str]]:
    """type number -> (name, request cell, response cell), from the "Version 2" table (`N NAME (v2)`)."""
    rows = {}
    for line in NATIVE_MD.read_text().splitlines():
        m = re.match(r"\| (\d+) ([A-Z_]+) \(v2\) \| (.*) \| (.*) \|$", line)
        if m:
            rows[int(m.group(1))] = (m.group(2), m.group(3), m.group(4))
    return rows


def parse_cell(cell: str) -> list:
    """A body cell as a list of (name, type) and ("x", count, [fields]) entries. Code spans hold
    `name:type` fields; `count x (...)` (or `count x` before one code span) repeats what follows;
    a count that names no earlier field repeats to the end of the frame; other text is prose."""
    if cell.strip() == "empty":
        return []
    stack: list[list] = [[]]
    kinds: list[str] = []  # "group" or "note", per open parenthesis
    pending: str | None = None  # a count read, waiting for its "(" or single code span
    for i, piece in enumerate(re.split(r"`([^`]*)`", cell)):
        if i % 2:  # a code span
            fields = [tuple(f.strip().split(":")) for f in piece.split(",") if ":" in f]
            if pending is not None:
                stack[-1].append(("x", pending, fields))
                pending = None
            else:
                stack[-1].extend(fields)
            continue
        for token in re.finditer(r"(\w+)\s*×|\(|\)", piece):
            if token.group(1):
                pending = token.group(1)
            elif token.group(0) == "(":
                if pending is not None:
                    kinds.append("group")
                    stack.append([])
                    stack[-1].append(pending)  # the count, first in the group's list
                    pending = None
                else:
                    kinds.append("note")
            elif kinds.pop() == "group":
                count, *fields = stack.pop()
                stack[-1].append(("x", count, fields))
    assert len(stack) == 1 and not kinds and pending is None, f"unbalanced cell: {cell}"
    return resolve_counts(stack[0])


def resolve_counts(fields: list) -> list:
    out: list = []
    for field in fields:
        if field[0] == "x":
            _, count, inner = field
            named = {f[0] for f in out if f[0] != "x"}
            out.append(("x", count if count in named else END, resolve_counts(inner)))
        else:
            out.append(field)
    return out


# ---- the declarations -----------------------------------------------------------------------

def field_type(sc) -> str:
    inner = sc.subcon if isinstance(sc, Renamed) else sc
    if isinstance(inner, (Rebuild, Length)):
        inner = inner.subcon
    if isinstance(inner, FormatField):
        return INTEGERS[inner.fmtstr]
    if isinstance(inner, ErrorFieldType):
        return "int16"
    if isinstance(inner, StrField):
        return "str?" if inner.nullable else "str"
    if isinstance(inner, MessageSet):
        return "bytes"
    raise AssertionError(f"no table type for {inner!r}")


def declared(layout: Record) -> list:
    out: list = []
    for sc in layout.subcons:
        inner = sc.subcon if isinstance(sc, Renamed) else sc
        if isinstance(inner, (Items, UntilEnd)):
            count = inner.count if isinstance(inner, Items) else END
            out.append(("x", count, item_fields(sc.name, inner.item)))
        else:
            out.append((sc.name, field_type(sc)))
    return out


def item_fields(name: str, item) -> list:
    if isinstance(item, Record):
        return declared(item)
    return [(name.removesuffix("s"), field_type(item))]  # a bare repeated field: "topics" x `topic:str`


# ---- the checks -----------------------------------------------------------------------------

def test_the_table_lists_every_request_type_by_its_number():
    assert {number: row[0] for number, row in table_rows().items()} == {t.value: t.name for t in RequestType}


@pytest.mark.parametrize("rtype", list(RequestType), ids=lambda t: t.name)
def test_request_layout_matches_the_table(rtype):
    _, request_cell, _ = table_rows()[rtype]
    assert declared(requests.LAYOUTS[rtype]) == parse_cell(request_cell)


@pytest.mark.parametrize("rtype", list(RequestType), ids=lambda t: t.name)
def test_response_layout_matches_the_table(rtype):
    _, _, response_cell = table_rows()[rtype]
    assert declared(responses.LAYOUTS[rtype]) == parse_cell(response_cell)


def test_the_v2_table_lists_exactly_the_bodies_version_2_changes():
    rows = v2_rows()
    changed_requests = {t for t in RequestType if requests.LAYOUTS_V2[t] is not requests.LAYOUTS[t]}
    changed_responses = {t for t in RequestType if responses.LAYOUTS_V2[t] is not responses.LAYOUTS[t]}
    assert set(rows) == changed_requests | changed_responses
    assert {t for t, row in rows.items() if row[2] != AS_V1} == changed_responses
    assert {t for t, row in rows.items() if row[1] != AS_V1} == changed_requests


@pytest.mark.parametrize("rtype", sorted(v2_rows()), ids=lambda t: RequestType(t).name)
def test_v2_layouts_match_the_v2_table(rtype):
    name, request_cell, response_cell = v2_rows()[rtype]
    assert name == RequestType(rtype).name
    if request_cell != AS_V1:
        assert declared(requests.LAYOUTS_V2[rtype]) == parse_cell(request_cell)
    if response_cell != AS_V1:
        assert declared(responses.LAYOUTS_V2[rtype]) == parse_cell(response_cell)


def test_the_cell_reader_reads_nesting_notes_and_repeats_to_the_end():
    assert parse_cell("`count:int16`, count × `topic:str` (0 = all)") == \
        [("count", "int16"), ("x", "count", [("topic", "str")])]
    assert parse_cell("count × (`error:int16`), **no count prefix**") == [("x", END, [("error", "int16")])]
    assert parse_cell("`n:int32`, n × (`a:str`, m:int16 (note), `m:int32`, m × `b:int64`)") == \
        [("n", "int32"), ("x", "n", [("a", "str"), ("m", "int32"), ("x", "m", [("b", "int64")])])]


def test_a_layout_that_differs_from_the_table_is_caught():
    from construct import Int32sb
    swapped = Record(requests.FetchRequest, "topic" / StrField(False), "offset" / Int32sb,
                     "partition" / Int32sb, "maxBytes" / Int32sb, "maxWaitMs" / Int32sb)
    assert declared(swapped) != parse_cell(table_rows()[RequestType.FETCH][1])


# ---- compiled code = the declaration --------------------------------------------------------

SAMPLES = [
    requests.ProduceRequest("t", 1, b"set"),
    requests.FetchRequest("t", 1, 2, 3, 4),
    requests.MultiFetchRequest([requests.FetchItem("a", 0, 1, 2), requests.FetchItem("b", 3, 4, 5)]),
    requests.MultiProduceRequest([requests.ProduceItem("a", 0, b"x"), requests.ProduceItem("b", 1, b"")]),
    requests.OffsetsRequest("t", 0, -2, 5),
    requests.CreateTopicRequest("t", 3, [("a", "b"), ("c", None)]),
    requests.DeleteTopicRequest("t"),
    requests.MetadataRequest(["a", "b"]),
    requests.DescribeConfigRequest("t"),
    requests.AlterConfigRequest("t", [("k", None)]),
    requests.DeleteRecordsRequest("t", 0, -1),
    requests.CommitOffsetRequest("g", "t", 0, 9, None),
    requests.FetchOffsetRequest("g", "t", 0),
    requests.HandshakeRequest(2, "client"),
    requests.HandshakeRequest(2, None),
    requests.SaslAuthenticateRequest("PLAIN", b"\0u\0p"),
]
SAMPLES_V2 = [
    requests.FetchRequest("t", 1, 2, 3, 4, 1),
    requests.MetadataRequest(["a"], True),
]


@pytest.mark.parametrize("req,layouts", [(r, requests.LAYOUTS) for r in SAMPLES] +
                         [(r, requests.LAYOUTS_V2) for r in SAMPLES_V2], ids=lambda r: getattr(r, "TYPE", ""))
def test_compiled_and_interpreted_agree(req, layouts):
    layout = layouts[req.TYPE]
    compiled, interpreted = PartsStream(), PartsStream()
    layout.compile().buildfunc(req, compiled, None)
    layout._build(req, interpreted, {}, "")
    wire = b"".join(bytes(p) for p in compiled.parts)
    assert wire == b"".join(bytes(p) for p in interpreted.parts)
    assert layout._parse(FrameStream(wire), {}, "") == req == layout.compile().parsefunc(FrameStream(wire), None)


NONE = responses.ErrorCode.NONE
RESPONSE_SAMPLES = [
    (RequestType.PRODUCE, responses.ProduceResponse(NONE, 5, -1)),
    (RequestType.FETCH, responses.FetchResponse(NONE, b"set")),
    (RequestType.MULTIFETCH, responses.MultiFetchResponse(NONE, [(NONE, b"x"), (1, b"")])),
    (RequestType.MULTIPRODUCE, responses.MultiProduceResponse(NONE, [(NONE, 1, -1), (3, -1, -1)])),
    (RequestType.OFFSETS, responses.OffsetsResponse(NONE, [0, 9])),
    (RequestType.CREATE_TOPIC, responses.EmptyResponse(NONE)),
    (RequestType.METADATA, responses.MetadataResponse(NONE, [responses.TopicMetadata(
        "t", NONE, [responses.PartitionMetadata(0, 1, 2)])])),
    (RequestType.DESCRIBE_CONFIG, responses.DescribeConfigResponse(NONE, [("k", "v"), ("n", None)])),
    (RequestType.DELETE_RECORDS, responses.DeleteRecordsResponse(NONE, 4)),
    (RequestType.FETCH_OFFSET, responses.FetchOffsetResponse(NONE, 7, None)),
    (RequestType.HANDSHAKE, responses.HandshakeResponse(NONE, 2, ["PLAIN", "SCRAM-SHA-256"])),
    (RequestType.SASL_AUTHENTICATE, responses.SaslAuthenticateResponse(NONE, b"x", 0)),
]
RESPONSE_SAMPLES_V2 = [
    (RequestType.FETCH, responses.FetchResponseV2(NONE, 9, 9, 0, [(1, 2), (3, 4)], b"set")),
]


@pytest.mark.parametrize("rtype,resp,layouts", [(t, r, responses.LAYOUTS) for t, r in RESPONSE_SAMPLES] +
                         [(t, r, responses.LAYOUTS_V2) for t, r in RESPONSE_SAMPLES_V2],
                         ids=lambda x: getattr(x, "name", ""))
def test_compiled_and_interpreted_agree_on_responses(rtype, resp, layouts):
    layout = layouts[rtype]
    compiled, interpreted = PartsStream(), PartsStream()
    layout.compile().buildfunc(resp, compiled, None)
    layout._build(resp, interpreted, {}, "")
    wire = b"".join(bytes(p) for p in compiled.parts)
    assert wire == b"".join(bytes(p) for p in interpreted.parts)
    assert layout._parse(FrameStream(wire), {}, "") == resp == layout.compile().parsefunc(FrameStream(wire), None)
