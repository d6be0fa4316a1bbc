"""multus-shim end to end against a real unix-socket server: ``shim.main`` in-process, and the
installed single-file executable as a subprocess (the way a container runtime runs it)."""

from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cni_shim import readiness, results, shim, wire
from cni_shim.__main__ import VERSION_OUTPUT, parse_flags, version_string
from cni_shim.errors import CNIError
from multusd import shim_install
from tests.unit.cni_shim.shimfakes import FakeDaemon, Request, Responder, response, text_error

RESULT_110: dict[str, Any] = {
    "cniVersion": "1.1.0",
    "interfaces": [{"mac": "aa:bb:cc:dd:ee:ff", "name": "eth0", "sandbox": "/var/run/netns/x"}],
    "ips": [{"address": "10.244.1.5/24", "gateway": "10.244.1.1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.244.1.1"}],
}
ALL_VERSIONS = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]


def conf(daemon: FakeDaemon | str, version: str = "0.3.1", **extra: object) -> bytes:
    socket_dir = daemon if isinstance(daemon, str) else daemon.socket_dir
    obj: dict[str, object] = {
        "cniVersion": version,
        "name": "multus-cni-network",
        "type": "multus-shim",
    }
    obj["daemonSocketDir"] = socket_dir
    obj.update(extra)
    return json.dumps(obj).encode()


def env(command: str = "ADD", **extra: str) -> dict[str, str]:
    e = {
        "CNI_COMMAND": command,
        "CNI_CONTAINERID": "abc",
        "CNI_NETNS": "/var/run/netns/does-not-exist",
        "CNI_IFNAME": "eth0",
        "CNI_ARGS": "K8S_POD_NAMESPACE=default;K8S_POD_NAME=p",
        "CNI_PATH": "/opt/cni/bin",
        "PATH": "/usr/sbin:/usr/bin",
        readiness.TIMEOUT_ENV: "2",
    }
    e.update(extra)
    return e


def run(environ: dict[str, str], stdin: bytes) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = shim.main(environ, stdin, out, err)
    return code, out.getvalue(), err.getvalue()


def result_route(result: dict[str, Any]) -> Responder:
    body = ('{"Result":' + json.dumps(result) + "}").encode()
    return lambda req: response(200, body, headers={"Content-Type": "text/plain; charset=utf-8"})


# --- ADD -------------------------------------------------------------------------------------


def test_add_asks_for_and_prints_a_print_ready_answer_verbatim(fake_daemon: FakeDaemon) -> None:
    printed = '{\n    "cniVersion": "0.3.1"\n}'
    fake_daemon.routes["/cni"] = lambda req: response(
        200, printed.encode(), headers={wire.PRINTED: "1"}
    )
    code, out, err = run(env(), conf(fake_daemon))
    assert (code, out, err) == (0, printed, "")
    assert fake_daemon.requests[-1].headers.get(wire.PRINT_REQUEST.lower()) == "1"


def test_add_converts_a_plain_result_answer_itself(fake_daemon: FakeDaemon) -> None:
    """An upstream daemon ignores the print request and answers ``{"Result":...}``."""
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    code, out, _ = run(env(), conf(fake_daemon, "1.0.0"))
    assert code == 0
    assert out == results.render(RESULT_110, "1.0.0")


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_add_prints_result_in_config_version(fake_daemon: FakeDaemon, version: str) -> None:
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    stdin = conf(fake_daemon, version)
    code, out, err = run(env(), stdin)
    assert (code, err) == (0, "")
    assert out == results.dumps_indent(results.convert(RESULT_110, version))
    assert not out.endswith("\n")
    assert json.loads(out)["cniVersion"] == version


def test_add_output_031_exact(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    code, out, _ = run(env(), conf(fake_daemon, "0.3.1"))
    assert code == 0
    assert (
        out
        == """{
    "cniVersion": "0.3.1",
    "interfaces": [
        {
            "name": "eth0",
            "mac": "aa:bb:cc:dd:ee:ff",
            "sandbox": "/var/run/netns/x"
        }
    ],
    "ips": [
        {
            "version": "4",
            "interface": 0,
            "address": "10.244.1.5/24",
            "gateway": "10.244.1.1"
        }
    ],
    "routes": [
        {
            "dst": "0.0.0.0/0",
            "gw": "10.244.1.1"
        }
    ],
    "dns": {}
}"""
    )


def test_add_empty_cni_version_prints_010(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    stdin = json.dumps({"name": "n", "daemonSocketDir": fake_daemon.socket_dir}).encode()
    code, out, _ = run(env(), stdin)
    assert code == 0
    assert out == results.dumps_indent(results.convert(RESULT_110, "0.1.0"))


def test_add_request_sequence_and_body(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    environ = env(EXTRA_VAR="x")
    stdin = conf(fake_daemon)
    assert run(environ, stdin)[0] == 0
    assert fake_daemon.paths() == ["/readyz", "/cni"]
    readyz, cni = fake_daemon.requests
    assert readyz.body == b"null"
    assert cni.body == wire.encode_request(environ, stdin)
    sent = json.loads(cni.body)
    assert sent["env"]["EXTRA_VAR"] == "x"  # the whole environment, as upstream
    assert base64.b64decode(sent["config"]) == stdin


def test_add_large_chunked_result(fake_daemon: FakeDaemon) -> None:
    big = dict(RESULT_110)
    big["interfaces"] = [{"name": f"net{i}", "mac": "aa:bb:cc:dd:ee:ff"} for i in range(300)]
    body = ('{"Result":' + json.dumps(big) + "}").encode()
    assert len(body) > 4096
    fake_daemon.routes["/cni"] = lambda req: response(200, body, chunked=True)
    code, out, _ = run(env(), conf(fake_daemon, "1.1.0"))
    assert code == 0
    assert len(json.loads(out)["interfaces"]) == 300


def test_add_waits_for_readyz(fake_daemon: FakeDaemon) -> None:
    answers = iter([500, 500, 200])
    fake_daemon.routes["/readyz"] = lambda req: response(next(answers), reason="X")
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    assert run(env(), conf(fake_daemon))[0] == 0
    assert fake_daemon.paths() == ["/readyz", "/readyz", "/readyz", "/cni"]


def test_add_readyz_timeout(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/readyz"] = lambda req: response(500, reason="X")
    code, out, _ = run(env(**{readiness.TIMEOUT_ENV: "0.35"}), conf(fake_daemon))
    assert code == 1
    assert json.loads(out) == {
        "code": 999,
        "msg": "CmdAdd (shim): timed out waiting for the condition: /readyz on "
        f"{fake_daemon.socket_path}: CNI request failed with status 500: ''",
    }
    assert "/cni" not in fake_daemon.paths()
    assert 2 <= fake_daemon.paths().count("/readyz") <= 6


def test_add_no_daemon_names_the_socket(short_dir: str) -> None:
    code, out, _ = run(env(**{readiness.TIMEOUT_ENV: "0.2"}), conf(short_dir))
    assert code == 1
    assert json.loads(out)["msg"] == (
        "CmdAdd (shim): timed out waiting for the condition: failed to send CNI request: "
        f'Post "http://dummy/readyz": dial unix {short_dir}/multus.sock: connect: '
        "no such file or directory"
    )


def test_add_falls_back_to_healthz_on_an_older_daemon(fake_daemon: FakeDaemon) -> None:
    """Daemons before /readyz (every release, the seed commit) answer it with 404."""
    del fake_daemon.routes["/readyz"]
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    assert run(env(), conf(fake_daemon))[0] == 0
    assert fake_daemon.paths() == ["/readyz", "/healthz", "/cni"]


def test_add_polls_healthz_after_the_404(fake_daemon: FakeDaemon) -> None:
    """The switch happens once: /readyz is not asked again, /healthz is polled."""
    del fake_daemon.routes["/readyz"]
    answers = iter([500, 200])
    fake_daemon.routes["/healthz"] = lambda req: response(next(answers), reason="X")
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    assert run(env(), conf(fake_daemon))[0] == 0
    assert fake_daemon.paths() == ["/readyz", "/healthz", "/healthz", "/cni"]


def test_add_older_daemon_not_healthy_times_out(fake_daemon: FakeDaemon) -> None:
    del fake_daemon.routes["/readyz"]
    fake_daemon.routes["/healthz"] = lambda req: response(500, reason="X")
    code, out, _ = run(env(**{readiness.TIMEOUT_ENV: "0.35"}), conf(fake_daemon))
    assert code == 1
    assert json.loads(out)["msg"].startswith(
        f"CmdAdd (shim): timed out waiting for the condition: /healthz on {fake_daemon.socket_path}"
    )
    assert fake_daemon.paths().count("/readyz") == 1


def test_add_text_error_gets_stdin_suffix(fake_daemon: FakeDaemon) -> None:
    text = 'ContainerID:"abc" Netns:"x" IfName:"eth0" Args:"" Path:"" ERRORED: boom'
    fake_daemon.routes["/cni"] = lambda req: text_error(400, text)
    stdin = conf(fake_daemon)
    code, out, _ = run(env(), stdin)
    assert code == 1
    assert json.loads(out) == {
        "code": 999,
        "msg": f"CmdAdd (shim): CNI request failed with status 400: '{text}\n': "
        f"StdinData: {stdin.decode()}",
    }


def test_add_cni_error_object_keeps_code_and_details(fake_daemon: FakeDaemon) -> None:
    body = b'{"code":11,"msg":"try again","details":"busy"}'
    fake_daemon.routes["/cni"] = lambda req: response(
        400, body, reason="Bad Request", headers={"Content-Type": "application/json"}
    )
    code, out, _ = run(env(), conf(fake_daemon))
    assert code == 1
    assert out == (
        '{\n    "code": 11,\n    "msg": "CmdAdd (shim): try again",\n    "details": "busy"\n}'
    )


@pytest.mark.parametrize("body", [b'{"Result":null}', b"", b"{}"])
def test_add_200_without_result_is_an_error(fake_daemon: FakeDaemon, body: bytes) -> None:
    fake_daemon.routes["/cni"] = lambda req: response(200, body)
    code, out, _ = run(env(), conf(fake_daemon))
    assert code == 1
    assert json.loads(out) == {
        "code": 999,
        "msg": "CmdAdd (shim): the daemon answered 200 without a result",
    }


def test_add_unparsable_response(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: response(200, b"{nope")
    code, out, _ = run(env(), conf(fake_daemon))
    assert code == 1
    assert json.loads(out) == {
        "code": 999,
        "msg": "CmdAdd (shim): failed to unmarshal response '{nope': invalid character 'n' "
        "looking for beginning of object key string",
    }


def test_add_connection_closed(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: None
    stdin = conf(fake_daemon)
    code, out, _ = run(env(), stdin)
    assert code == 1
    assert json.loads(out)["msg"] == (
        f'CmdAdd (shim): failed to send CNI request: Post "http://dummy/cni": EOF: '
        f"StdinData: {stdin.decode()}"
    )


def test_add_truncated_body(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n{"
    stdin = conf(fake_daemon)
    _, out, _ = run(env(), stdin)
    assert json.loads(out)["msg"] == (
        f"CmdAdd (shim): failed to read CNI result: unexpected EOF: StdinData: {stdin.decode()}"
    )


def test_add_shim_config_type_mismatch(fake_daemon: FakeDaemon) -> None:
    code, out, _ = run(env(), conf(fake_daemon, logToStderr="yes"))
    assert code == 1
    assert json.loads(out) == {
        "code": 999,
        "msg": "CmdAdd (shim): invalid CNI configuration passed to multus-shim: failed to "
        "gather the multus configuration: json: cannot unmarshal string into Go struct field "
        "ShimNetConf.logToStderr of type bool",
    }
    assert fake_daemon.requests == []


def test_add_netns_check_after_printing(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    code, out, _ = run(env(CNI_NETNS=f"/proc/{os.getpid()}/ns/net"), conf(fake_daemon))
    assert code == 1
    printed = results.dumps_indent(results.convert(RESULT_110, "0.3.1"))
    assert out.startswith(printed)
    assert json.loads(out[len(printed) :])["code"] == 8


# --- CHECK / GC / STATUS ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "prefix", "extra_env"),
    [
        ("CHECK", "CmdCheck (shim): ", {}),
        ("GC", "CmdGC (shim): ", {"CNI_CONTAINERID": "", "CNI_NETNS": "", "CNI_IFNAME": ""}),
        ("STATUS", "CmdStatus (shim): ", {"CNI_CONTAINERID": "", "CNI_IFNAME": ""}),
    ],
)
def test_check_gc_status(
    fake_daemon: FakeDaemon, command: str, prefix: str, extra_env: dict[str, str]
) -> None:
    environ = env(command, **extra_env)
    stdin = conf(fake_daemon, "1.1.0")
    fake_daemon.routes["/cni"] = lambda req: response(200)
    assert run(environ, stdin) == (0, "", "")
    assert fake_daemon.paths() == ["/readyz", "/cni"]

    fake_daemon.routes["/cni"] = lambda req: response(
        400, b'{"code":50,"msg":"status failed"}', reason="Bad Request"
    )
    code, out, _ = run(environ, stdin)
    assert code == 1
    assert json.loads(out) == {"code": 50, "msg": prefix + "status failed"}

    fake_daemon.routes["/cni"] = lambda req: text_error(400, "nope")
    _, out, _ = run(environ, stdin)
    assert json.loads(out) == {
        "code": 999,
        "msg": f"{prefix}CNI request failed with status 400: 'nope\n': StdinData: "
        + stdin.decode(),
    }


def status_env(**extra: str) -> dict[str, str]:
    """A runtime's STATUS: no pod context, and no test-only readiness override, so a shim that
    still waited would wait its full minute (and then answer 999)."""
    environ = env("STATUS", CNI_CONTAINERID="", CNI_IFNAME="", **extra)
    del environ[readiness.TIMEOUT_ENV]
    return environ


def test_status_without_a_daemon_is_code_50_at_once(short_dir: str) -> None:
    code, out, _ = run(status_env(), conf(short_dir, "1.1.0"))
    assert code == 1
    assert json.loads(out) == {
        "code": 50,
        "msg": "CmdStatus (shim): daemon not reachable: failed to send CNI request: "
        f'Post "http://dummy/readyz": dial unix {short_dir}/multus.sock: connect: '
        "no such file or directory",
    }


def test_status_of_a_daemon_not_ready_is_one_probe_and_code_50(fake_daemon: FakeDaemon) -> None:
    """A daemon starting or draining answers /readyz 500: asked once, not polled."""
    fake_daemon.routes["/readyz"] = lambda req: response(500, b'{"ready":false}', reason="X")
    code, out, _ = run(status_env(), conf(fake_daemon, "1.1.0"))
    assert code == 1
    assert json.loads(out) == {
        "code": 50,
        "msg": f"CmdStatus (shim): daemon not ready: /readyz on {fake_daemon.socket_path}: "
        "CNI request failed with status 500: '{\"ready\":false}'",
    }
    assert fake_daemon.paths() == ["/readyz"]


def test_status_probe_of_a_daemon_that_never_answers_is_bounded(
    short_dir: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket that accepts connections nobody serves (a wedged daemon) costs one probe."""
    monkeypatch.setattr(readiness, "PROBE_TIMEOUT", 0.2)
    path = f"{short_dir}/multus.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(4)  # never accepted: connect succeeds, no answer ever comes
        code, out, _ = run(status_env(), conf(short_dir, "1.1.0"))
    assert code == 1
    error = json.loads(out)
    assert error["code"] == 50
    assert error["msg"].startswith("CmdStatus (shim): daemon not reachable: failed to send CNI")


def test_status_of_an_older_daemon_asks_its_healthz_once(fake_daemon: FakeDaemon) -> None:
    del fake_daemon.routes["/readyz"]
    fake_daemon.routes["/cni"] = lambda req: response(200)
    assert run(status_env(), conf(fake_daemon, "1.1.0")) == (0, "", "")
    assert fake_daemon.paths() == ["/readyz", "/healthz", "/cni"]

    fake_daemon.requests.clear()
    fake_daemon.routes["/healthz"] = lambda req: response(500, reason="X")
    code, out, _ = run(status_env(), conf(fake_daemon, "1.1.0"))
    assert (code, json.loads(out)["code"]) == (1, 50)
    assert fake_daemon.paths() == ["/readyz", "/healthz"]


def test_status_daemon_gone_after_its_probe_is_code_50(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: None  # the connection closes without an answer
    stdin = conf(fake_daemon, "1.1.0")
    code, out, _ = run(status_env(), stdin)
    assert code == 1
    assert json.loads(out) == {
        "code": 50,
        "msg": 'CmdStatus (shim): failed to send CNI request: Post "http://dummy/cni": EOF: '
        f"StdinData: {stdin.decode()}",
    }


def test_status_keeps_the_daemons_own_code(fake_daemon: FakeDaemon) -> None:
    """Once the daemon answers, its code stands: a delegate's 51, or 999 for a text error."""
    fake_daemon.routes["/cni"] = lambda req: response(
        400, b'{"code":51,"msg":"limited","details":"no uplink"}', reason="Bad Request"
    )
    code, out, _ = run(status_env(), conf(fake_daemon, "1.1.0"))
    assert code == 1
    assert json.loads(out) == {
        "code": 51,
        "msg": "CmdStatus (shim): limited",
        "details": "no uplink",
    }
    fake_daemon.routes["/cni"] = lambda req: text_error(500, "boom")
    _, out, _ = run(status_env(), conf(fake_daemon, "1.1.0"))
    assert json.loads(out)["code"] == 999


# --- DEL -------------------------------------------------------------------------------------


def test_del_uses_healthz_not_readyz(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/readyz"] = lambda req: response(500, reason="X")  # draining
    fake_daemon.routes["/cni"] = lambda req: response(200)
    assert run(env("DEL"), conf(fake_daemon)) == (0, "", "")
    assert fake_daemon.paths() == ["/healthz", "/cni"]
    assert fake_daemon.requests[0].body == b"null"


@pytest.mark.parametrize(
    "route",
    [
        lambda req: text_error(400, "failed"),
        lambda req: response(400, b'{"code":7,"msg":"m"}'),
        lambda req: None,
    ],
)
def test_del_errors_only_logged(fake_daemon: FakeDaemon, route: Responder) -> None:
    fake_daemon.routes["/cni"] = route
    code, out, err = run(env("DEL"), conf(fake_daemon))
    assert (code, out, err) == (0, "", "")


def test_a_del_refused_with_code_11_fails_so_the_runtime_retries(
    fake_daemon: FakeDaemon,
) -> None:
    refusal = b'{"code":11,"msg":"too many requests in the daemon (1024, maxPendingRequests)"}'
    fake_daemon.routes["/cni"] = lambda req: response(400, refusal)
    code, out, _ = run(env("DEL"), conf(fake_daemon))
    assert code == 1
    error = json.loads(out)
    assert error["code"] == 11 and error["msg"].startswith("CmdDel (shim): "), error


def test_del_no_daemon_logs_to_stderr(short_dir: str) -> None:
    stdin = conf(short_dir, logToStderr=True, logLevel="error")
    code, out, err = run(env("DEL"), stdin)
    assert (code, out) == (0, "")
    sock = f"{short_dir}/multus.sock"
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d) \[error\] "
        + re.escape(
            "CmdDel (shim): CheckAPIReadyNow: Daemon not reachable over socketfile: failed to "
            f'send CNI request: Post "http://dummy/healthz": dial unix {sock}: connect: '
            "no such file or directory"
        )
        + "\n",
        err,
    )


def test_del_healthz_non_200(fake_daemon: FakeDaemon, short_dir: str) -> None:
    fake_daemon.routes["/healthz"] = lambda req: response(500, reason="X")
    log = Path(short_dir) / "sub" / "shim.log"
    stdin = conf(fake_daemon, logFile=str(log), logLevel="ERROR")
    assert run(env("DEL"), stdin) == (0, "", "")
    assert "/cni" not in fake_daemon.paths()
    assert log.read_text().endswith(
        "[error] CmdDel (shim): CheckAPIReadyNow: Daemon not reachable over socketfile: "
        "CNI request failed with status 500: ''\n"
    )


def test_del_still_validated_by_skel(fake_daemon: FakeDaemon) -> None:
    code, out, _ = run(env("DEL", CNI_IFNAME=""), conf(fake_daemon))
    assert code == 1
    assert json.loads(out)["code"] == 4


def test_unknown_log_level_reported(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = lambda req: response(200)
    code, _, err = run(env("DEL"), conf(fake_daemon, logLevel="loud"))
    assert code == 0
    assert err == "multus logging: cannot set logging level to loud\n"


def test_verbose_logs_result(fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    _, _, err = run(env(), conf(fake_daemon, logToStderr=True, logLevel="verbose"))
    assert "[verbose] CmdAdd (shim): {" in err


# --- config and helpers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("socket_dir", "path"),
    [
        ("/run/multus/", "/run/multus/multus.sock"),
        ("/run/multus", "/run/multus/multus.sock"),
        ("//host/run//multus/./", "/host/run/multus/multus.sock"),
        ("rel/dir", "rel/dir/multus.sock"),
    ],
)
def test_socket_path(socket_dir: str, path: str) -> None:
    assert shim.socket_path(socket_dir) == path


def test_shim_config_defaults_and_case_insensitivity() -> None:
    c = shim.parse_shim_config(b'{"DAEMONSOCKETDIR":"/x","cniversion":"1.0.0","logLevel":null}')
    assert (c.socket_dir, c.cni_version, c.log_level, c.log_to_stderr) == ("/x", "1.0.0", "", False)
    assert shim.parse_shim_config(b'{"daemonSocketDir":""}').socket_dir == "/run/multus/"


# --- flags -----------------------------------------------------------------------------------


def test_flags() -> None:
    v = version_string() + "\n"
    assert v == "multus-shim: version:master@git(), commit:unknown commit, date:unknown date\n"
    for args in (["-v"], ["--version"], ["-version=true"], ["-v", "extra"]):
        assert parse_flags(["multus-shim", *args]) == (0, v, "")
    assert parse_flags(["multus-shim", "-v=false"]) == (None, "", "")
    assert parse_flags(["multus-shim", "plain", "-v"]) == (None, "", "")
    code, out, err = parse_flags(["multus-shim", "-x"])
    assert (code, out) == (2, "")
    assert err.startswith("flag provided but not defined: -x\nUsage of multus-shim:\n  -v\t")
    assert parse_flags(["multus-shim", "-h"])[0] == 0


# --- the installed single-file executable ----------------------------------------------------


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shim_install.install_shim(tmp_path_factory.mktemp("bin"))


def exec_shim(
    path: Path, environ: dict[str, str], stdin: bytes = b"", *args: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [str(path), *args], input=stdin, env=environ, capture_output=True, timeout=60, check=False
    )


def test_installed_file(installed: Path) -> None:
    data = installed.read_bytes()
    assert data.startswith(b"#!/usr/bin/python3 -IS\n")
    assert installed.stat().st_mode & 0o777 == 0o755
    assert [p.name for p in installed.parent.iterdir()] == ["multus-shim"]  # no temp leftovers


def test_installed_version(installed: Path) -> None:
    proc = exec_shim(installed, {"CNI_COMMAND": "VERSION"}, b"ignored")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, VERSION_OUTPUT.encode(), b"")


def test_installed_version_flag(installed: Path) -> None:
    proc = exec_shim(installed, {"CNI_COMMAND": "VERSION"}, b"", "-version")
    assert proc.stdout == (version_string() + "\n").encode()


def test_installed_banner(installed: Path) -> None:
    proc = exec_shim(installed, {})
    assert proc.returncode == 0
    assert proc.stderr.startswith(b"meta-plugin that delegates to other CNI plugins\n")


def test_installed_add(installed: Path, fake_daemon: FakeDaemon) -> None:
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    stdin = conf(fake_daemon, "1.0.0")
    proc = exec_shim(installed, env(), stdin)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert proc.stdout.decode() == results.dumps_indent(results.convert(RESULT_110, "1.0.0"))
    sent = json.loads(fake_daemon.requests[-1].body)
    assert sent["env"]["CNI_COMMAND"] == "ADD"


def test_installed_del_no_daemon(installed: Path, short_dir: str) -> None:
    proc = exec_shim(installed, env("DEL"), conf(short_dir))
    assert (proc.returncode, proc.stdout) == (0, b"")


def test_installed_add_no_daemon(installed: Path, short_dir: str) -> None:
    proc = exec_shim(installed, env(**{readiness.TIMEOUT_ENV: "0.2"}), conf(short_dir))
    assert proc.returncode == 1
    assert json.loads(proc.stdout) == {
        "code": 999,
        "msg": "CmdAdd (shim): timed out waiting for the condition: failed to send CNI request: "
        f'Post "http://dummy/readyz": dial unix {short_dir}/multus.sock: connect: '
        "no such file or directory",
    }


def test_installed_status_no_daemon(installed: Path, short_dir: str) -> None:
    proc = exec_shim(installed, status_env(), conf(short_dir, "1.1.0"))
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["code"] == 50


def test_installed_source_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_daemon: FakeDaemon
) -> None:
    """Bytecode built by another Python is not used: the embedded sources are compiled."""
    monkeypatch.setattr(importlib.util, "MAGIC_NUMBER", b"\x00\x00\r\n")
    path = shim_install.install_shim(tmp_path)
    fake_daemon.routes["/cni"] = result_route(RESULT_110)
    proc = exec_shim(path, env(), conf(fake_daemon, "0.4.0"))
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert json.loads(proc.stdout)["cniVersion"] == "0.4.0"


def test_install_replaces_atomically(tmp_path: Path) -> None:
    first = shim_install.install_shim(tmp_path, name="shim")
    with first.open("rb") as running:  # a shim that is executing keeps its old inode
        old_inode = os.fstat(running.fileno()).st_ino
        second = shim_install.install_shim(tmp_path, name="shim", interpreter="/usr/bin/env")
        assert second == first
        assert second.stat().st_ino != old_inode
        assert running.read(22) == b"#!/usr/bin/python3 -IS"
    assert second.read_bytes().startswith(b"#!/usr/bin/env -IS\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shim"]


def test_request_type_is_shared(fake_daemon: FakeDaemon) -> None:
    # The fake server's parser and the wire decoder agree on what the shim sent.
    fake_daemon.routes["/cni"] = lambda req: response(200)
    run(env("CHECK"), conf(fake_daemon, "1.1.0"))
    cni: Request = fake_daemon.requests[-1]
    got_env, config, attrs = wire.decode_request(cni.body)
    assert got_env["CNI_COMMAND"] == "CHECK"
    assert attrs is None
    assert json.loads(config)["daemonSocketDir"] == fake_daemon.socket_dir


# --- readiness -------------------------------------------------------------------------------


def test_ready_timeout_env_is_test_only_override() -> None:
    assert readiness.timeout_from_env({}) == 60.0
    assert readiness.timeout_from_env({readiness.TIMEOUT_ENV: "0.5"}) == 0.5
    assert readiness.timeout_from_env({readiness.TIMEOUT_ENV: "soon"}) == 60.0
    assert readiness.timeout_from_env({readiness.TIMEOUT_ENV: "-1"}) == 60.0


def test_wait_until_ready_polls_immediately_then_every_interval(short_dir: str) -> None:
    sleeps: list[float] = []
    with pytest.raises(CNIError) as info:
        readiness.wait_until_ready(
            f"{short_dir}/multus.sock", timeout=0.35, interval=0.1, sleep=sleeps.append
        )
    assert info.value.msg.startswith("timed out waiting for the condition: failed to send")
    assert sleeps and set(sleeps) == {0.1}


def test_wait_until_ready_first_probe_is_immediate(fake_daemon: FakeDaemon) -> None:
    sleeps: list[float] = []
    readiness.wait_until_ready(fake_daemon.socket_path, sleep=sleeps.append)
    assert (sleeps, fake_daemon.paths()) == ([], ["/readyz"])
