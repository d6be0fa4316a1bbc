"""Plugin lookup and the subprocess executor, against real executables."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cni_shim.errors import CNIError
from multusd.cni import invoke
from multusd.cni.invoke import LibcniError, SubprocessExecutor, find_plugin
from tests.waits import eventually

MakePlugin = Callable[[str, str], str]  # the conftest fixture

ENV = {"PATH": "/usr/bin:/bin"}


def _gone(pid: int) -> bool:
    # /proc/<pid> exists for zombies too, so its absence proves the plugin was reaped.
    return not Path(f"/proc/{pid}").exists()


async def _wait_for_file(path: Path) -> str:
    """What a plugin wrote to ``path``, once it has (created empty first, then written)."""
    await eventually(lambda: path.exists() and path.read_text() != "", 10)
    return path.read_text()


def test_find_plugin_first_regular_file(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "bridge").mkdir()  # a directory is not a plugin
    (second / "bridge").write_text("")
    assert find_plugin("bridge", [str(first), str(second)]) == str(second / "bridge")


def test_find_plugin_errors(tmp_path: Path) -> None:
    with pytest.raises(LibcniError) as info:
        find_plugin("nope", ["/x/y", str(tmp_path)])
    assert info.value.msg == f'failed to find plugin "nope" in path [/x/y {tmp_path}]'
    with pytest.raises(LibcniError, match=r"invalid plugin name: \.\./bridge"):
        find_plugin("../bridge", [str(tmp_path)])
    with pytest.raises(LibcniError, match="no plugin name provided"):
        find_plugin("", [str(tmp_path)])
    with pytest.raises(LibcniError, match="no paths provided"):
        find_plugin("bridge", [])


async def test_stdin_env_and_stdout(make_plugin: MakePlugin) -> None:
    path = make_plugin(
        "echo",
        """
        import os, sys
        data = sys.stdin.buffer.read()
        sys.stdout.write(os.environ["CNI_COMMAND"] + ":" + data.decode())
        """,
    )
    out = await SubprocessExecutor().execute(
        path, b'{"x":1}', {**ENV, "CNI_COMMAND": "ADD"}, timeout=10
    )
    assert out == b'ADD:{"x":1}'


async def test_a_config_larger_than_a_pipe_buffer_reaches_the_plugin(
    make_plugin: MakePlugin,
) -> None:
    path = make_plugin("count", "import sys\nprint(len(sys.stdin.buffer.read()))\n")
    out = await SubprocessExecutor().execute(path, b"x" * (1 << 20), ENV, timeout=10)
    assert out == b"1048576\n"


async def test_a_plugin_gone_before_its_config_is_written_leaves_no_error_behind(
    make_plugin: MakePlugin, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A DEL with nothing to do may exit before the daemon, busy with other requests, gets to
    # write its config. Fed through a pipe, that write failed with EPIPE and asyncio kept the
    # error in a future nobody awaits, logged with a traceback as "Future exception was never
    # retrieved" once collected. The wrapper makes the loop that busy: it returns the process
    # only after it exited (not reaped, so asyncio still sees it exit).
    spawn = asyncio.create_subprocess_exec

    async def spawn_then_wait_for_the_exit(*args: Any, **kwargs: Any) -> Any:
        proc = await spawn(*args, **kwargs)
        with contextlib.suppress(ChildProcessError):  # asyncio's watcher may have reaped it
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spawn_then_wait_for_the_exit)
    path = make_plugin("quick", "print('{}')\n")
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        assert await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10) == b"{}\n"
        gc.collect()
        await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_cni_error_object_keeps_code(make_plugin: MakePlugin) -> None:
    path = make_plugin(
        "fails",
        """
        import sys
        print('{"code": 123, "msg": "no way", "details": "really"}')
        sys.exit(1)
        """,
    )
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10)
    assert info.value == CNIError(123, "no way", "really")
    assert not isinstance(info.value, LibcniError)


async def test_error_object_keys_are_case_insensitive(make_plugin: MakePlugin) -> None:
    path = make_plugin("fails", 'import sys\nprint(\'{"Code": 7, "MSG": "bad"}\')\nsys.exit(1)\n')
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10)
    assert info.value == CNIError(7, "bad")


async def test_crash_with_stderr_only(make_plugin: MakePlugin) -> None:
    path = make_plugin("crash", 'import sys\nsys.stderr.write("oops \\"x\\"\\n")\nsys.exit(2)\n')
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10)
    assert info.value == CNIError(0, 'netplugin failed: "oops \\"x\\"\\n"')


async def test_failure_without_any_output(make_plugin: MakePlugin) -> None:
    path = make_plugin("silent", "import sys\nsys.exit(3)\n")
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10)
    assert info.value.msg == "netplugin failed with no error message: exit status 3"


async def test_killed_by_signal(make_plugin: MakePlugin) -> None:
    path = make_plugin("suicide", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10)
    assert info.value.msg == "netplugin failed with no error message: signal: killed"


async def test_garbage_stdout(make_plugin: MakePlugin) -> None:
    path = make_plugin("garbage", 'import sys\nsys.stdout.write("garbage")\nsys.exit(1)\n')
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10)
    assert info.value.msg == (
        'netplugin failed but error parsing its diagnostic message "garbage": '
        "invalid character 'g' looking for beginning of value"
    )


async def test_not_executable(make_plugin: MakePlugin) -> None:
    path = make_plugin("noexec", "")
    Path(path).chmod(0o644)
    with pytest.raises(CNIError) as info:
        await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10)
    assert info.value.msg == (
        f"netplugin failed with no error message: fork/exec {path}: permission denied"
    )


async def test_successful_stderr_is_logged_at_debug(
    make_plugin: MakePlugin, caplog: pytest.LogCaptureFixture
) -> None:
    path = make_plugin("chatty", 'import sys\nsys.stderr.write("hello")\nprint("{}")\n')
    with caplog.at_level(logging.DEBUG, logger="multusd.cni.invoke"):
        out = await SubprocessExecutor().execute(path, b"{}", ENV, timeout=10)
    assert out == b"{}\n"
    assert any("hello" in r.getMessage() and r.levelno == logging.DEBUG for r in caplog.records)


HANG = """
import os, signal, sys, time
def noted(signum, frame):  # not obeyed, so the executor escalates to SIGKILL; but noted
    with open(sys.argv[0] + ".term", "w") as f:
        f.write("SIGTERM")
signal.signal(signal.SIGTERM, noted)
with open(sys.argv[0] + ".pid", "w") as f:
    f.write(str(os.getpid()))
while True:
    time.sleep(1)
"""


async def test_timeout_kills_and_reaps(make_plugin: MakePlugin) -> None:
    path = make_plugin("hang", HANG)
    executor = SubprocessExecutor(kill_grace=0.2)
    with pytest.raises(CNIError) as info:
        await executor.execute(path, b"{}", ENV, timeout=1.0)
    assert info.value.code == invoke.TIMEOUT_CODE == 11
    assert "did not finish within 1s" in info.value.msg
    pid = int(Path(path + ".pid").read_text())
    assert _gone(pid)


async def test_cancellation_kills_and_reaps(make_plugin: MakePlugin) -> None:
    path = make_plugin("hang", HANG)
    executor = SubprocessExecutor(kill_grace=0.2)
    task = asyncio.create_task(executor.execute(path, b"{}", ENV, timeout=None))
    pid = int(await _wait_for_file(Path(path + ".pid")))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _gone(pid)


async def test_cancellation_during_reap_still_reaps(make_plugin: MakePlugin) -> None:
    path = make_plugin("hang", HANG)
    executor = SubprocessExecutor(kill_grace=0.5)
    task = asyncio.create_task(executor.execute(path, b"{}", ENV, timeout=None))
    pid = int(await _wait_for_file(Path(path + ".pid")))
    task.cancel()
    await _wait_for_file(Path(path + ".term"))  # now inside the SIGTERM grace period
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _gone(pid)


async def test_text_file_busy_is_retried_with_a_fresh_process(make_plugin: MakePlugin) -> None:
    path = make_plugin("busy", 'print("{\\"ok\\": true}")\n')
    writer = open(path, "ab")  # noqa: SIM115 - held open across the retries, closed by sleep()
    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        if len(sleeps) == 2:
            writer.close()

    try:
        out = await SubprocessExecutor(sleep=sleep).execute(path, b"{}", ENV, timeout=10)
    finally:
        writer.close()
    assert out == b'{"ok": true}\n'
    assert sleeps == [1.0, 1.0]


async def test_text_file_busy_gives_up(make_plugin: MakePlugin) -> None:
    path = make_plugin("busy", "")
    sleeps: list[float] = []

    async def sleep(delay: float) -> None:
        sleeps.append(delay)

    with open(path, "ab"), pytest.raises(CNIError) as info:
        await SubprocessExecutor(sleep=sleep).execute(path, b"{}", ENV, timeout=10)
    assert len(sleeps) == 5
    busy = os.strerror(errno.ETXTBSY).lower()
    assert info.value.msg == f"netplugin failed with no error message: fork/exec {path}: {busy}"


def _not_running(pid: int) -> bool:
    """Gone, or a zombie: killed, even if whoever inherited it has not reaped it yet."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def _group_plugin(bin_dir: Path, name: str) -> Path:
    """A shell plugin whose ``sleep`` child outlives it unless the whole group is killed."""
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\nsleep 1000 &\necho "$$ $!" > "{path}.pids"\nwait\n')
    path.chmod(0o755)
    return path


async def _pids(path: Path) -> tuple[int, int]:
    leader, child = (await _wait_for_file(Path(f"{path}.pids"))).split()
    return int(leader), int(child)


async def test_timeout_kills_the_plugins_whole_process_group(bin_dir: Path) -> None:
    path = _group_plugin(bin_dir, "group")
    executor = SubprocessExecutor(kill_grace=0.5)
    with pytest.raises(CNIError) as info:
        await executor.execute(str(path), b"{}", ENV, timeout=1.0)
    assert info.value.code == invoke.TIMEOUT_CODE
    leader, child = await _pids(path)
    assert _gone(leader)
    assert _not_running(child)


async def test_cancellation_kills_the_plugins_whole_process_group(bin_dir: Path) -> None:
    path = _group_plugin(bin_dir, "group")
    task = asyncio.create_task(
        SubprocessExecutor(kill_grace=0.5).execute(str(path), b"{}", ENV, timeout=None)
    )
    leader, child = await _pids(path)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _gone(leader)
    assert _not_running(child)


async def test_a_child_holding_stdout_after_the_plugin_exited_is_killed(bin_dir: Path) -> None:
    # The plugin itself returns at once; its background child keeps the stdout pipe open,
    # so the run only ends at the timeout, and the child must not survive it.
    path = bin_dir / "leaves-child"
    path.write_text(f'#!/bin/sh\nsleep 1000 &\necho "$!" > "{path}.pids"\nexit 0\n')
    path.chmod(0o755)
    with pytest.raises(CNIError):
        await SubprocessExecutor(kill_grace=0.2).execute(str(path), b"{}", ENV, timeout=1.0)
    child = int(await _wait_for_file(Path(f"{path}.pids")))
    assert _not_running(child)


async def test_the_request_deadline_bounds_a_plugin_without_a_timeout(bin_dir: Path) -> None:
    path = _group_plugin(bin_dir, "group")
    loop = asyncio.get_running_loop()
    with invoke.plugin_deadline(loop.time() + 1.0), pytest.raises(CNIError) as info:
        await SubprocessExecutor(kill_grace=0.2).execute(str(path), b"{}", ENV, timeout=None)
    assert info.value.code == invoke.TIMEOUT_CODE
    assert "the request's deadline" in info.value.msg
    _, child = await _pids(path)
    assert _not_running(child)


async def test_the_shorter_of_plugin_timeout_and_deadline_wins(bin_dir: Path) -> None:
    path = _group_plugin(bin_dir, "group")
    loop = asyncio.get_running_loop()
    with invoke.plugin_deadline(loop.time() + 60), pytest.raises(CNIError) as info:
        await SubprocessExecutor(kill_grace=0.2).execute(str(path), b"{}", ENV, timeout=1.0)
    assert "did not finish within 1s and was killed" in info.value.msg


def test_deadline_scope_is_restored() -> None:
    assert invoke.current_deadline() is None
    with invoke.plugin_deadline(5.0):
        with invoke.plugin_deadline(None):
            assert invoke.current_deadline() is None
        assert invoke.current_deadline() == 5.0
    assert invoke.current_deadline() is None


ADOPT = """
import asyncio, sys
from pathlib import Path
from multusd.cni import invoke, reaper

async def main() -> None:
    reaper.adopt_orphans()
    path = sys.argv[1]
    try:
        await invoke.SubprocessExecutor(kill_grace=0.2).execute(
            path, b"{}", {"PATH": "/usr/bin:/bin"}, timeout=1.0
        )
    except invoke.CNIError:
        pass
    _, child = Path(path + ".pids").read_text().split()
    print("reaped" if not Path("/proc/" + child).exists() else "left")

asyncio.run(main())
"""


async def test_a_subreaper_daemon_reaps_the_killed_groups_orphans(bin_dir: Path) -> None:
    # In its own process: becoming a child subreaper changes the whole process.
    path = _group_plugin(bin_dir, "group")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ADOPT, str(path), stdout=asyncio.subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[3],
    )  # fmt: skip
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert out.decode().strip() == "reaped"
