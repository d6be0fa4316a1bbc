"""The shim <-> daemon wire format, byte for byte as upstream's Go structs encode it."""

from __future__ import annotations

import base64
import json

import pytest

from cni_shim import wire
from cni_shim.errors import DECODING_FAILURE, INTERNAL, CNIError

CONFIG = b'{"cniVersion":"0.3.1","name":"multus-cni-network","type":"multus-shim"}'


def test_encode_request_exact_bytes() -> None:
    env = {"PATH": "/usr/bin", "CNI_COMMAND": "ADD", "CNI_ARGS": "K8S_POD_NAME=a;X=<&>"}
    body = wire.encode_request(env, CONFIG)
    b64 = base64.b64encode(CONFIG).decode()
    assert (
        body
        == (
            '{"env":{"CNI_ARGS":"K8S_POD_NAME=a;X=\\u003c\\u0026\\u003e","CNI_COMMAND":"ADD",'
            '"PATH":"/usr/bin"},"config":"' + b64 + '"}'
        ).encode()
    )


def test_encode_request_env_rules() -> None:
    # Empty key (an "=x" environ entry) skipped; keys trimmed; trimmed-to-empty key kept.
    env = {"": "skipped", " SPACED\t": "v", "  ": "blank", "K": "a=b"}
    decoded = json.loads(wire.encode_request(env, b""))
    assert decoded == {"env": {"SPACED": "v", "": "blank", "K": "a=b"}}


def test_encode_request_omits_empty_fields() -> None:
    assert wire.encode_request({}, b"") == b"{}"
    assert wire.encode_request({}, b"x") == b'{"config":"eA=="}'


def test_encode_request_invalid_utf8_becomes_replacement_char() -> None:
    env = {"K": b"\xff".decode("utf-8", "surrogateescape")}
    assert json.loads(wire.encode_request(env, b""))["env"]["K"] == "\ufffd"


def test_encode_request_roundtrip() -> None:
    env = {"CNI_COMMAND": "DEL", "Ü": "ö"}
    got_env, config, attrs = wire.decode_request(wire.encode_request(env, CONFIG))
    assert (got_env, config, attrs) == (env, CONFIG, None)


def test_decode_request_full() -> None:
    body = json.dumps(
        {
            "ENV": {"CNI_COMMAND": "ADD", "N": None},
            "Config": base64.b64encode(b"{}").decode(),
            "interfaceAttributes": {"ips": ["10.1.1.5/24"], "mac": "aa", "cni-args": None},
        }
    ).encode()
    env, config, attrs = wire.decode_request(body)
    assert env == {"CNI_COMMAND": "ADD", "N": ""}
    assert config == b"{}"
    assert attrs == {"ips": ["10.1.1.5/24"], "mac": "aa", "cni-args": None}


def test_decode_request_null_and_empty_object() -> None:
    assert wire.decode_request(b"null") == ({}, b"", None)
    assert wire.decode_request(b"{}") == ({}, b"", None)


@pytest.mark.parametrize(
    ("body", "msg"),
    [
        (b"", "unexpected end of JSON input"),
        (b'{"env":', "unexpected end of JSON input"),
        (b"nope", "invalid character 'o' in literal null (expecting 'u')"),
        (b"[1]", "json: cannot unmarshal array into Go value of type api.Request"),
        (
            b'{"config":{"a":1}}',
            "json: cannot unmarshal object into Go struct field Request.config of type []uint8",
        ),
        (
            b'{"env":[]}',
            "json: cannot unmarshal array into Go struct field Request.env of type "
            "map[string]string",
        ),
        (
            b'{"env":{"A":1}}',
            "json: cannot unmarshal number into Go struct field Request.env of type string",
        ),
        (b'{"config":"!!!!"}', "illegal base64 data at input byte 0"),
        (b'{"config":"eA="}', "illegal base64 data at input byte 0"),
        (
            b'{"interfaceAttributes":"x"}',
            "json: cannot unmarshal string into Go struct field Request.interfaceAttributes "
            "of type api.DelegateInterfaceAttributes",
        ),
    ],
)
def test_decode_request_errors(body: bytes, msg: str) -> None:
    with pytest.raises(CNIError) as info:
        wire.decode_request(body)
    assert info.value.code == DECODING_FAILURE
    if body == b'{"config":"eA="}':
        assert info.value.msg.startswith("illegal base64 data at input byte")
    else:
        assert info.value.msg == msg


def test_decode_response() -> None:
    assert wire.decode_response(b"") is None
    assert wire.decode_response(b'{"Result":null}') is None
    got = wire.decode_response(b'{"result":{"cniVersion":"1.1.0","junk":1}}')
    assert got is not None
    assert got["cniVersion"] == "1.1.0"
    assert "junk" not in got  # decoded as Go's types100.Result: unknown keys dropped
    assert wire.decode_response(b"{}") is None


@pytest.mark.parametrize(
    ("body", "tail"),
    [
        (b"{", "unexpected end of JSON input"),
        (b"x", "invalid character 'x' looking for beginning of value"),
        (
            b'{"Result":1}',
            "json: cannot unmarshal number into Go struct field Response.Result "
            "of type types100.Result",
        ),
        (b'{"a":1}}', "invalid character '}' after top-level value"),
        (b'{"a" 1}', "invalid character '1' after object key"),
        (b'{"a":1 "b"}', "invalid character '\"' after object key:value pair"),
        (b"[1 2]", "invalid character '2' after array element"),
        (b"{1}", "invalid character '1' looking for beginning of object key string"),
    ],
)
def test_decode_response_errors(body: bytes, tail: str) -> None:
    with pytest.raises(CNIError) as info:
        wire.decode_response(body)
    assert info.value.code == INTERNAL
    assert info.value.msg == f"failed to unmarshal response '{body.decode()}': {tail}"


def test_encode_response_none_is_empty_body() -> None:
    assert wire.encode_response(None) == b""


@pytest.mark.parametrize(
    ("config_version", "answered"),
    [
        ("1.1.0", "1.1.0"),
        ("1.0.0", "1.0.0"),
        ("0.4.0", "1.0.0"),
        ("0.3.1", "1.0.0"),
        ("0.2.0", "1.0.0"),
        ("", "1.0.0"),
        ("2.0.0", "1.0.0"),
    ],
)
def test_answer_version_every_shim_can_decode(config_version: str, answered: str) -> None:
    """Shims on libcni 1.0/1.1 have no 1.1.0 converter; only a 1.1.0 config proves one."""
    result = {
        "cniVersion": "1.1.0",
        "interfaces": [{"name": "eth0", "sandbox": "/run/netns/x"}],
        "ips": [{"address": "10.1.0.5/24", "interface": 0}],
    }
    body = wire.encode_response(result, config_version)
    got = wire.decode_response(body)
    assert got is not None
    assert got["cniVersion"] == answered
    assert got["ips"] == [{"interface": 0, "address": "10.1.0.5/24"}]


def test_decode_error_body_cni_error_object() -> None:
    err = wire.decode_error_body(400, b'{"code":50,"msg":"status failed","details":"d"}')
    assert err == CNIError(50, "status failed", "d")
    assert not isinstance(err, wire.RequestFailed)
    # Case-insensitive fields, missing code means 0 (Go zero value).
    assert wire.decode_error_body(400, b'{"MSG":"m"}') == CNIError(0, "m")


@pytest.mark.parametrize(
    "body",
    [
        b"plain text error\n",
        b'{"code":7}',
        b'{"code":7,"msg":""}',
        b'{"code":-1,"msg":"m"}',
        b'{"code":1.5,"msg":"m"}',
        b'{"code":"7","msg":"m"}',
        b"",
        b"[]",
    ],
)
def test_decode_error_body_text_form(body: bytes) -> None:
    err = wire.decode_error_body(400, body)
    assert isinstance(err, wire.RequestFailed)
    assert err.code == INTERNAL
    assert err.status == 400
    assert err.msg == f"CNI request failed with status 400: '{body.decode()}'"


def test_a_body_that_is_no_object_is_not_decoded() -> None:
    # An upstream daemon without /readyz answers "404 page not found" on every ADD's probe; a
    # JSON syntax error would make the shim import json (~15 ms) just to raise it.
    from tests.unit.cni_shim.shimfakes import bare_python

    out = bare_python(
        "from cni_shim import wire; e = wire.decode_error_body(404, b'404 page not found\\n'); "
        "print(type(e).__name__, 'json' in sys.modules)"
    )
    assert out.split() == ["RequestFailed", "False"]
