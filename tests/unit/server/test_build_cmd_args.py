"""``/cni`` request validation before any command runs (docs/upstream.md, "Request handling (/cni)",
steps 2–6)."""

from __future__ import annotations

import pytest

from cni_shim.errors import INVALID_ENVIRONMENT, CNIError
from multusd.server.handlers import build_cmd_args

CONFIG = b'{"name":"multus-cni-network"}'
ARGS = "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=pod"


def env(**overrides: str | None) -> dict[str, str]:
    base: dict[str, str | None] = {
        "CNI_COMMAND": "ADD",
        "CNI_CONTAINERID": "cid",
        "CNI_NETNS": "/var/run/netns/x",
        "CNI_IFNAME": "eth1",
        "CNI_ARGS": ARGS,
        "CNI_PATH": "/opt/cni/bin",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def error(environ: dict[str, str]) -> str:
    with pytest.raises(CNIError) as info:
        build_cmd_args(environ, CONFIG)
    assert info.value.code == INVALID_ENVIRONMENT
    return info.value.msg


def test_add() -> None:
    cmd = build_cmd_args(env(), CONFIG)
    assert (cmd.command, cmd.container_id, cmd.netns, cmd.ifname, cmd.args, cmd.config) == (
        "ADD",
        "cid",
        "/var/run/netns/x",
        "eth1",
        ARGS,
        CONFIG,
    )


@pytest.mark.parametrize("value", [None, ""])
def test_command_required(value: str | None) -> None:
    assert error(env(CNI_COMMAND=value)) == "unexpected or missing CNI_COMMAND"


@pytest.mark.parametrize("command", ["GC", "STATUS"])
def test_node_commands_need_no_pod_env(command: str) -> None:
    cmd = build_cmd_args({"CNI_COMMAND": command}, CONFIG)
    assert (cmd.command, cmd.container_id, cmd.netns, cmd.ifname, cmd.args) == (
        command,
        "",
        "",
        "",
        "",
    )
    assert cmd.config == CONFIG


@pytest.mark.parametrize("key", ["CNI_CONTAINERID", "CNI_ARGS"])
def test_missing_keys(key: str) -> None:
    assert error(env(**{key: None})) == f"could not extract the CNI command args: missing {key}"


@pytest.mark.parametrize("command", ["ADD", "CHECK", "VERSION"])
def test_netns_required_except_del(command: str) -> None:
    assert error(env(CNI_COMMAND=command, CNI_NETNS=None)) == (
        "could not extract the CNI command args: missing CNI_NETNS"
    )


def test_del_without_netns_accepted() -> None:
    cmd = build_cmd_args(env(CNI_COMMAND="DEL", CNI_NETNS=None), CONFIG)
    assert cmd.command == "DEL"
    assert cmd.netns == ""


def test_del_accepts_an_empty_netns_and_ifname() -> None:
    cmd = build_cmd_args(env(CNI_COMMAND="DEL", CNI_NETNS="", CNI_IFNAME=""), CONFIG)
    assert (cmd.container_id, cmd.netns, cmd.ifname) == ("cid", "", "eth0")


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
def test_a_missing_ifname_defaults_to_eth0(command: str) -> None:
    assert build_cmd_args(env(CNI_COMMAND=command, CNI_IFNAME=None), CONFIG).ifname == "eth0"


# The values end up in file names (<cniDir>/<containerID>, result caches), netlink calls and
# plugin environments: libcni's rules and texts, before anything touches the filesystem.
INVALID = [
    ("ADD", {"CNI_CONTAINERID": ""}, 3, "missing containerID"),
    ("DEL", {"CNI_CONTAINERID": ""}, 3, "missing containerID"),
    ("ADD", {"CNI_CONTAINERID": "/tmp/x"}, 4, "invalid characters in containerID"),
    ("DEL", {"CNI_CONTAINERID": "../../x"}, 4, "invalid characters in containerID"),
    ("CHECK", {"CNI_CONTAINERID": "a/b"}, 4, "invalid characters in containerID"),
    ("DEL", {"CNI_CONTAINERID": "-x"}, 4, "invalid characters in containerID"),
    ("ADD", {"CNI_IFNAME": ""}, 4, "interface name is empty"),
    ("CHECK", {"CNI_IFNAME": ""}, 4, "interface name is empty"),
    ("ADD", {"CNI_IFNAME": "x" * 16}, 4, "interface name is too long"),
    ("DEL", {"CNI_IFNAME": "a/b"}, 4, "interface name contains / or : or whitespace characters"),
    ("ADD", {"CNI_IFNAME": "."}, 4, "interface name is . or .."),
    ("ADD", {"CNI_NETNS": ""}, 4, 'CNI_NETNS must be an absolute path, got ""'),
    ("CHECK", {"CNI_NETNS": "ns"}, 4, 'CNI_NETNS must be an absolute path, got "ns"'),
    ("DEL", {"CNI_NETNS": "ns"}, 4, 'CNI_NETNS must be an absolute path, got "ns"'),
    ("ADD", {"CNI_NETNS": "/x\x00"}, 4, "CNI_NETNS contains a NUL character"),
    ("ADD", {"CNI_IFNAME": "e\x00"}, 4, "CNI_IFNAME contains a NUL character"),
    ("DEL", {"CNI_ARGS": ARGS + "\x00"}, 4, "CNI_ARGS contains a NUL character"),
]


@pytest.mark.parametrize(("command", "change", "code", "msg"), INVALID)
def test_pod_values_are_validated(
    command: str, change: dict[str, str], code: int, msg: str
) -> None:
    with pytest.raises(CNIError) as info:
        build_cmd_args(env(CNI_COMMAND=command, **change), CONFIG)
    assert (info.value.code, info.value.msg) == (code, msg)


def test_hotplug_requests_are_validated_too() -> None:
    with pytest.raises(CNIError, match="invalid characters in containerID"):
        build_cmd_args(env(CNI_CONTAINERID="/x"), CONFIG, pod_context=True)


@pytest.mark.parametrize(("args", "part"), [("", ""), (ARGS + ";", ""), ("A=b=c;" + ARGS, "A=b=c")])
def test_bad_cni_args(args: str, part: str) -> None:
    assert error(env(CNI_ARGS=args)) == (
        f"could not extract the kubernetes runtime args: invalid CNI_ARG '{part}'"
    )


@pytest.mark.parametrize(
    ("args", "key"),
    [("K8S_POD_NAME=pod", "K8S_POD_NAMESPACE"), ("K8S_POD_NAMESPACE=ns", "K8S_POD_NAME")],
)
def test_pod_identity_keys_required(args: str, key: str) -> None:
    assert error(env(CNI_ARGS=args)) == (
        f"could not extract the kubernetes runtime args: missing {key}"
    )


@pytest.mark.parametrize("command", ["ADD", "DEL", "CHECK"])
@pytest.mark.parametrize(("name", "namespace"), [("", "ns"), ("pod", ""), ("", "")])
def test_empty_pod_identity_rejected(command: str, name: str, namespace: str) -> None:
    args = f"K8S_POD_NAMESPACE={namespace};K8S_POD_NAME={name}"
    assert error(env(CNI_COMMAND=command, CNI_ARGS=args)) == (
        f"required CNI variable missing. pod name: {name}; pod namespace: {namespace}"
    )


def test_identity_values_are_trimmed() -> None:
    assert error(env(CNI_ARGS="K8S_POD_NAMESPACE= ;K8S_POD_NAME=p")) == (
        "required CNI variable missing. pod name: p; pod namespace: "
    )


def test_unknown_command_passes_envelope_checks() -> None:
    # Dispatch (not this function) rejects it with "unknown cmd type".
    assert build_cmd_args(env(CNI_COMMAND="FOO"), CONFIG).command == "FOO"
