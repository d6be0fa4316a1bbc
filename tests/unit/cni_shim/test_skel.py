"""libcni skel v1.3.0 behaviour: every check, code and text a runtime can observe."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cni_shim import skel
from cni_shim.__main__ import VERSION_OUTPUT
from cni_shim.errors import CNIError
from tests.netns import pin_netns, unpin_netns

CONF = b'{"cniVersion":"1.1.0","name":"net","type":"multus-shim"}'
BASE_ENV = {
    "CNI_COMMAND": "ADD",
    "CNI_CONTAINERID": "abc",
    "CNI_NETNS": "/var/run/netns/x",
    "CNI_IFNAME": "eth0",
    "CNI_PATH": "/opt/cni/bin",
}


def run(
    env: dict[str, str],
    stdin: bytes = CONF,
    handler: Callable[[skel.CmdArgs], None] | None = None,
) -> tuple[int, str, str, list[skel.CmdArgs]]:
    calls: list[skel.CmdArgs] = []

    def record(args: skel.CmdArgs) -> None:
        calls.append(args)
        if handler is not None:
            handler(args)

    handlers = dict.fromkeys(("ADD", "CHECK", "DEL", "GC", "STATUS"), record)
    out, err = io.StringIO(), io.StringIO()
    code = skel.run(env, stdin, out, err, handlers)
    return code, out.getvalue(), err.getvalue(), calls


def error_of(out: str) -> dict[str, object]:
    obj = json.loads(out)
    assert isinstance(obj, dict)
    return obj


def env_with(**kw: str | None) -> dict[str, str]:
    env = dict(BASE_ENV)
    for k, v in kw.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def test_version_output_and_constant() -> None:
    code, out, err, calls = run({"CNI_COMMAND": "VERSION"}, stdin=b"not json")
    assert (code, err, calls) == (0, "", [])
    assert out == (
        '{"cniVersion":"1.1.0","supportedVersions":'
        '["0.1.0","0.2.0","0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]}\n'
    )
    assert skel.version_output() == VERSION_OUTPUT == out


def test_empty_command_prints_banner_to_stderr() -> None:
    code, out, err, _ = run({})
    assert (code, out) == (0, "")
    assert err == (
        "meta-plugin that delegates to other CNI plugins\n"
        "CNI protocol versions supported: 0.1.0, 0.2.0, 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n"
    )


def test_stdin_not_read_when_env_missing() -> None:
    class Exploding(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            raise AssertionError("stdin read")

    out, err = io.StringIO(), io.StringIO()
    assert skel.run({}, Exploding(), out, err, {}) == 0


@pytest.mark.parametrize(
    ("env", "missing"),
    [
        ({"CNI_COMMAND": "ADD"}, "CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH"),
        ({"CNI_COMMAND": "CHECK"}, "CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH"),
        ({"CNI_COMMAND": "DEL"}, "CNI_CONTAINERID,CNI_IFNAME,CNI_PATH"),
        ({"CNI_COMMAND": "GC"}, "CNI_PATH"),
        ({"CNI_COMMAND": "STATUS"}, "CNI_PATH"),
        (env_with(CNI_NETNS=None), "CNI_NETNS"),
        (env_with(CNI_PATH=""), "CNI_PATH"),
        (env_with(CNI_CONTAINERID=None, CNI_PATH=None), "CNI_CONTAINERID,CNI_PATH"),
    ],
)
def test_missing_env(env: dict[str, str], missing: str) -> None:
    code, out, _, calls = run(env)
    assert (code, calls) == (1, [])
    assert error_of(out) == {"code": 4, "msg": f"required env variables [{missing}] missing"}


def test_error_json_is_indented_without_newline() -> None:
    _, out, _, _ = run({"CNI_COMMAND": "GC"})
    assert out == '{\n    "code": 4,\n    "msg": "required env variables [CNI_PATH] missing"\n}'


def test_optional_env_not_required() -> None:
    # CNI_ARGS never required; DEL needs no CNI_NETNS; GC/STATUS need no pod env.
    assert run(env_with(CNI_ARGS=None))[0] == 0
    assert run(env_with(CNI_COMMAND="DEL", CNI_NETNS=None))[0] == 0
    assert run({"CNI_COMMAND": "STATUS", "CNI_PATH": "/x"})[0] == 0


@pytest.mark.parametrize("cid", ["abc", "A1", "0_.-x", "x" * 200])
def test_valid_container_ids(cid: str) -> None:
    skel.validate_container_id(cid)


@pytest.mark.parametrize("cid", ["-abc", "_a", ".a", "a/b", "a b", "a\n", "é", "a:b"])
def test_invalid_container_id(cid: str) -> None:
    code, out, _, _ = run(env_with(CNI_CONTAINERID=cid))
    assert code == 1
    assert error_of(out) == {"code": 4, "msg": "invalid characters in containerID", "details": cid}


def test_container_id_validated_before_missing_list() -> None:
    # skel returns a validation error immediately, before collecting later missing names.
    _, out, _, _ = run(env_with(CNI_CONTAINERID="-x", CNI_PATH=None))
    assert error_of(out)["msg"] == "invalid characters in containerID"
    # ... but a missing earlier name does not stop a later validation error either.
    _, out, _, _ = run(env_with(CNI_CONTAINERID=None, CNI_IFNAME="a/b"))
    assert error_of(out)["msg"] == "interface name contains / or : or whitespace characters"


def test_container_id_not_validated_for_gc() -> None:
    assert (
        run({"CNI_COMMAND": "GC", "CNI_PATH": "/x", "CNI_CONTAINERID": "-bad"}, stdin=CONF)[0] == 0
    )


def test_validate_container_id_empty() -> None:
    with pytest.raises(CNIError) as info:
        skel.validate_container_id("")
    assert info.value == CNIError(3, "missing containerID")


@pytest.mark.parametrize(
    ("ifname", "error"),
    [
        (
            "x" * 16,
            {
                "code": 4,
                "msg": "interface name is too long",
                "details": "interface name should be less than 16 characters",
            },
        ),
        (
            "ééééééééé",
            {
                "code": 4,
                "msg": "interface name is too long",
                "details": "interface name should be less than 16 characters",
            },
        ),
        (".", {"code": 4, "msg": "interface name is . or .."}),
        ("..", {"code": 4, "msg": "interface name is . or .."}),
        ("a/b", {"code": 4, "msg": "interface name contains / or : or whitespace characters"}),
        ("a:b", {"code": 4, "msg": "interface name contains / or : or whitespace characters"}),
        ("a b", {"code": 4, "msg": "interface name contains / or : or whitespace characters"}),
        ("a\tb", {"code": 4, "msg": "interface name contains / or : or whitespace characters"}),
        ("a\u00a0", {"code": 4, "msg": "interface name contains / or : or whitespace characters"}),
    ],
)
def test_invalid_ifname(ifname: str, error: dict[str, object]) -> None:
    code, out, _, _ = run(env_with(CNI_IFNAME=ifname))
    assert code == 1
    assert error_of(out) == error


def test_ifname_rules_direct() -> None:
    skel.validate_ifname("x" * 15)
    skel.validate_ifname("net1.100")
    skel.validate_ifname("a\x1c")  # not whitespace for Go
    with pytest.raises(CNIError) as info:
        skel.validate_ifname("")
    assert info.value == CNIError(4, "interface name is empty")


@pytest.mark.parametrize(
    ("stdin", "error"),
    [
        (b"", {"code": 6, "msg": "error unmarshall network config: unexpected end of JSON input"}),
        (b"{", {"code": 6, "msg": "error unmarshall network config: unexpected end of JSON input"}),
        (
            b"x",
            {
                "code": 6,
                "msg": "error unmarshall network config: invalid character 'x' "
                "looking for beginning of value",
            },
        ),
        (
            b'{"name":5}',
            {
                "code": 6,
                "msg": "error unmarshall network config: json: cannot "
                "unmarshal number into Go struct field .name of type string",
            },
        ),
        (
            b"[]",
            {
                "code": 6,
                "msg": "error unmarshall network config: json: cannot unmarshal "
                'array into Go value of type struct { Name string "json:\\"name\\"" }',
            },
        ),
        (b"{}", {"code": 7, "msg": "missing network name"}),
        (b"null", {"code": 7, "msg": "missing network name"}),
        (b'{"name":""}', {"code": 7, "msg": "missing network name"}),
        (
            b'{"name":"-x"}',
            {"code": 7, "msg": "invalid characters found in network name", "details": "-x"},
        ),
        (
            b'{"name":"a b"}',
            {"code": 7, "msg": "invalid characters found in network name", "details": "a b"},
        ),
    ],
)
def test_network_config_checks(stdin: bytes, error: dict[str, object]) -> None:
    code, out, _, calls = run(dict(BASE_ENV), stdin=stdin)
    assert (code, calls) == (1, [])
    assert error_of(out) == error


def test_network_name_case_insensitive_field() -> None:
    assert run(dict(BASE_ENV), stdin=b'{"NAME":"net","cniVersion":"1.1.0"}')[0] == 0


def test_validate_network_name_direct() -> None:
    with pytest.raises(CNIError) as info:
        skel.validate_network_name("")
    assert info.value == CNIError(7, "missing network name:")
    skel.validate_network_name("macvlan-conf.v1_2")


@pytest.mark.parametrize("version", ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"])
def test_supported_versions_reach_handler(version: str) -> None:
    conf = json.dumps({"cniVersion": version, "name": "n"}).encode()
    code, _, _, calls = run(dict(BASE_ENV), stdin=conf)
    assert (code, len(calls)) == (0, 1)
    assert calls[0].stdin_data == conf
    assert calls[0].container_id == "abc"


def test_empty_version_is_010() -> None:
    assert run(dict(BASE_ENV), stdin=b'{"name":"n"}')[0] == 0


@pytest.mark.parametrize("version", ["0.5.0", "2.0.0", "1.1", "foo"])
def test_incompatible_version(version: str) -> None:
    conf = json.dumps({"cniVersion": version, "name": "n"}).encode()
    code, out, _, calls = run(dict(BASE_ENV), stdin=conf)
    assert (code, calls) == (1, [])
    assert error_of(out) == {
        "code": 1,
        "msg": "incompatible CNI versions",
        "details": f'config is "{version}", plugin supports ["0.1.0" "0.2.0" "0.3.0" "0.3.1" '
        '"0.4.0" "1.0.0" "1.1.0"]',
    }


def test_version_type_error() -> None:
    code, out, _, _ = run(dict(BASE_ENV), stdin=b'{"name":"n","cniVersion":1}')
    assert code == 1
    assert error_of(out) == {
        "code": 6,
        "msg": "decoding version from network config: json: cannot unmarshal number into Go "
        "struct field .cniVersion of type string",
    }


@pytest.mark.parametrize(
    ("cmd", "version", "msg"),
    [
        ("CHECK", "0.3.1", "config version does not allow CHECK"),
        ("CHECK", "", "config version does not allow CHECK"),
        ("GC", "1.0.0", "config version does not allow GC"),
        ("STATUS", "0.4.0", "config version does not allow STATUS"),
        ("CHECK", "2.0.0", "plugin version does not allow CHECK"),
        ("GC", "1.2.0", "plugin version does not allow GC"),
        ("STATUS", "3.0.0", "plugin version does not allow STATUS"),
    ],
)
def test_version_gates(cmd: str, version: str, msg: str) -> None:
    conf = json.dumps({"cniVersion": version, "name": "n"}).encode()
    code, out, _, calls = run(env_with(CNI_COMMAND=cmd), stdin=conf)
    assert (code, calls) == (1, [])
    assert error_of(out) == {"code": 1, "msg": msg}


def test_version_gate_then_reconcile() -> None:
    # 0.5.0 passes the CHECK gate (>= 0.4.0, some plugin version >= it) but is not supported.
    conf = b'{"cniVersion":"0.5.0","name":"n"}'
    _, out, _, _ = run(env_with(CNI_COMMAND="CHECK"), stdin=conf)
    assert error_of(out)["msg"] == "incompatible CNI versions"


def test_version_gate_parse_error() -> None:
    conf = b'{"cniVersion":"x.1","name":"n"}'
    _, out, _, _ = run(env_with(CNI_COMMAND="CHECK"), stdin=conf)
    assert error_of(out) == {
        "code": 6,
        "msg": 'failed to convert major version part "x": strconv.Atoi: parsing "x": '
        "invalid syntax",
    }


@pytest.mark.parametrize(
    ("cmd", "version"), [("CHECK", "0.4.0"), ("GC", "1.1.0"), ("STATUS", "1.1.0")]
)
def test_version_gates_pass(cmd: str, version: str) -> None:
    conf = json.dumps({"cniVersion": version, "name": "n"}).encode()
    code, _, _, calls = run(env_with(CNI_COMMAND=cmd), stdin=conf)
    assert (code, len(calls)) == (0, 1)


def test_unknown_command_after_config_validation() -> None:
    _, out, _, _ = run({"CNI_COMMAND": "FOO"}, stdin=b"{}")
    assert error_of(out)["msg"] == "missing network name"
    code, out, _, _ = run({"CNI_COMMAND": "FOO"}, stdin=CONF)
    assert code == 1
    assert error_of(out) == {"code": 4, "msg": "unknown CNI_COMMAND: FOO"}


def test_handler_errors() -> None:
    def plain(args: skel.CmdArgs) -> None:
        raise RuntimeError("boom")

    def coded(args: skel.CmdArgs) -> None:
        raise CNIError(11, "later", "d")

    assert error_of(run(dict(BASE_ENV), handler=plain)[1]) == {"code": 999, "msg": "boom"}
    assert error_of(run(dict(BASE_ENV), handler=coded)[1]) == {
        "code": 11,
        "msg": "later",
        "details": "d",
    }


def test_stdin_read_error() -> None:
    class Broken(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            raise OSError(5, "Input/output error")

    out, err = io.StringIO(), io.StringIO()
    assert skel.run(dict(BASE_ENV), Broken(), out, err, {}) == 1
    assert error_of(out.getvalue()) == {
        "code": 5,
        "msg": "error reading from stdin: [Errno 5] Input/output error",
    }


def test_binary_streams() -> None:
    out, err = io.BytesIO(), io.BytesIO()
    assert skel.run({"CNI_COMMAND": "VERSION"}, b"", out, err, {}) == 0
    assert out.getvalue() == VERSION_OUTPUT.encode()


# --- post-ADD/DEL netns self-check --------------------------------------------------------


OWN_NETNS = f"/proc/{os.getpid()}/ns/net"


@pytest.mark.parametrize("cmd", ["ADD", "DEL"])
def test_own_netns_rejected_after_success(cmd: str) -> None:
    code, out, _, calls = run(env_with(CNI_COMMAND=cmd, CNI_NETNS=OWN_NETNS))
    assert (code, len(calls)) == (1, 1)  # the handler ran, then the check failed
    assert error_of(out) == {
        "code": 8,
        "msg": "plugin's netns and netns from CNI_NETNS should not be the same",
    }


@pytest.mark.parametrize("override", ["1", "true", "TRUE", "True"])
def test_own_netns_override(override: str) -> None:
    env = env_with(CNI_NETNS=OWN_NETNS, CNI_NETNS_OVERRIDE=override)
    assert run(env)[0] == 0


def test_netns_override_other_values_do_not_count() -> None:
    env = env_with(CNI_NETNS=OWN_NETNS, CNI_NETNS_OVERRIDE="yes")
    assert run(env)[0] == 1


def test_missing_netns_path_is_fine() -> None:
    assert run(env_with(CNI_NETNS="/nonexistent/netns"))[0] == 0
    assert run(env_with(CNI_COMMAND="DEL", CNI_NETNS=None))[0] == 0


def test_other_netns_accepted(tmp_path: Path) -> None:
    # Root and util-linux are prerequisites of the suite (CI runs as root): fail, never skip.
    # Pinned on a file of the test's own (``ip netns add`` would create /run/netns).
    pinned = tmp_path / "netns"
    pin_netns(pinned)
    try:
        assert run(env_with(CNI_NETNS=str(pinned)))[0] == 0
    finally:
        unpin_netns(pinned)


def test_check_netns_not_run_for_check() -> None:
    conf = b'{"cniVersion":"1.1.0","name":"n"}'
    assert run(env_with(CNI_COMMAND="CHECK", CNI_NETNS=OWN_NETNS), stdin=conf)[0] == 0
