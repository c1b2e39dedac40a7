"""Topic names: Kafka's rules, code 17."""

import pytest

from protocol import ErrorCode, InvalidTopicName, ProtocolError, has_collision, validate_topic_name
from protocol.errors import ProtocolError as DirectProtocolError


@pytest.mark.parametrize("name", ["a", "A-z_0.9", "__consumer_offsets", "...", "x" * 249, "-", "_"])
def test_legal(name):
    assert validate_topic_name(name) is None


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "tøpic", "a\n",
                                  "a:b", "a*", "\u0661", None, b"topic"])
def test_illegal(name):
    with pytest.raises(InvalidTopicName) as e:
        validate_topic_name(name)
    assert e.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION == 17
    assert not isinstance(e.value, ProtocolError)  # well-formed bytes, a broken rule


def test_collision():
    assert has_collision("a.b", "a_b")
    assert has_collision("a.b", "a.b")
    assert not has_collision("a.b", "a-b")


def test_protocol_error_carries_code_and_message():
    e = DirectProtocolError(42, "bad")
    assert e.code is ErrorCode.INVALID_REQUEST and e.message == "bad"
    assert "bad" in str(e) and "INVALID_REQUEST" in str(e)


def test_error_code_numbers_are_kafkas():
    assert {c.name: c.value for c in ErrorCode} == {
        "NONE": 0, "UNKNOWN_SERVER_ERROR": -1, "OFFSET_OUT_OF_RANGE": 1, "CORRUPT_MESSAGE": 2,
        "UNKNOWN_TOPIC_OR_PARTITION": 3, "MESSAGE_TOO_LARGE": 10, "INVALID_TOPIC_EXCEPTION": 17,
        "RECORD_LIST_TOO_LARGE": 18, "TOPIC_AUTHORIZATION_FAILED": 29, "GROUP_AUTHORIZATION_FAILED": 30,
        "CLUSTER_AUTHORIZATION_FAILED": 31, "INVALID_TIMESTAMP": 32, "UNSUPPORTED_SASL_MECHANISM": 33,
        "ILLEGAL_SASL_STATE": 34,
        "SASL_AUTHENTICATION_FAILED": 58, "TOPIC_ALREADY_EXISTS": 36, "INVALID_PARTITIONS": 37,
        "INVALID_CONFIG": 40, "INVALID_REQUEST": 42, "OUT_OF_ORDER_SEQUENCE_NUMBER": 45,
        "DUPLICATE_SEQUENCE_NUMBER": 46, "INVALID_PRODUCER_EPOCH": 47, "INVALID_TXN_STATE": 48,
        "TRANSACTION_COORDINATOR_FENCED": 52, "KAFKA_STORAGE_ERROR": 56,
        "INVALID_RECORD": 87, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED": 53, "SECURITY_DISABLED": 54,
    }


def test_storage_error_codes_all_have_names():
    errors = pytest.importorskip("kafka_format.errors")
    for cls in vars(errors).values():
        if isinstance(cls, type) and issubclass(cls, errors.StrataError):
            assert ErrorCode(cls.code) is not None
