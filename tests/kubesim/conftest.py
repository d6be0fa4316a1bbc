"""Fixtures for the emulator's tests: in-process and subprocess emulators, kubectl, clients."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client, config

from multusd.kubesim import KubeSim, Settings
from multusd.kubesim.client import ControlClient, connect

# Short bookmark interval so bookmark tests take a second, not a minute.
TEST_SETTINGS = Settings(bookmark_interval=0.5)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "scale: the 50,000-pod emulator scale test (deselect with -m 'not scale')"
    )


@pytest.fixture
async def kubesim() -> AsyncIterator[KubeSim]:
    """An emulator on a free port of 127.0.0.1, plain http."""
    async with KubeSim(TEST_SETTINGS) as sim:
        yield sim


@pytest.fixture
async def kubesim_tls() -> AsyncIterator[KubeSim]:
    async with KubeSim(TEST_SETTINGS, tls_enabled=True) as sim:
        yield sim


@pytest.fixture
async def kubeconfig(kubesim: KubeSim, short_tmp: Path) -> Path:
    return await kubesim.write_kubeconfig(short_tmp / "kubeconfig")


@pytest.fixture
async def http(kubesim: KubeSim) -> AsyncIterator[aiohttp.ClientSession]:
    """Raw HTTP to the emulator with its bearer token, for requests no client library makes."""
    headers = {"Authorization": f"Bearer {kubesim.token}"}
    async with aiohttp.ClientSession(kubesim.url, headers=headers) as session:
        yield session


@pytest.fixture
async def control(kubeconfig: Path) -> AsyncIterator[ControlClient]:
    """The emulator's control API (faults, snapshots), over HTTP as a test rig would use it."""
    async with await connect(kubeconfig) as ctl:
        yield ctl


@pytest.fixture
async def api_client(kubeconfig: Path) -> AsyncIterator[client.ApiClient]:
    """A kubernetes_asyncio ApiClient configured from the emulator's kubeconfig."""
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        yield api


@dataclass
class SimProcess:
    proc: asyncio.subprocess.Process
    kubeconfig: Path
    workdir: Path


@pytest.fixture
async def kubesim_process(short_tmp: Path) -> AsyncIterator[SimProcess]:
    """``python -m multusd.kubesim serve`` in a subprocess, stopped with SIGTERM."""
    kubeconfig = short_tmp / "kubeconfig"
    seed = short_tmp / "seed.yaml"
    seed.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: seeded, namespace: demo}\n"
        "spec: {nodeName: node1, containers: [{name: c, image: busybox}]}\n"
        "status: {phase: Running, podIP: 10.0.0.5}\n"
    )
    # stderr goes to a file: nobody drains a pipe while the test runs.
    stderr = (short_tmp / "stderr.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "multusd.kubesim", "serve", "--port", "0",
        "--kubeconfig-out", str(kubeconfig), "--seed", str(seed),
        "--incluster-dir", str(short_tmp / "sa"),
        stdout=asyncio.subprocess.PIPE, stderr=stderr,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            while True:
                line = await proc.stdout.readline()
                if not line:
                    await proc.wait()
                    err = (short_tmp / "stderr.log").read_text()
                    pytest.fail(f"kubesim exited early ({proc.returncode}): {err}")
                if line.startswith(b"kubesim serving on"):
                    break
        yield SimProcess(proc, kubeconfig, short_tmp)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(15):
                    await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        stderr.close()


def _kubectl_candidates() -> list[str]:
    found = [os.environ.get("KUBECTL", ""), shutil.which("kubectl") or ""]
    found += sorted(
        map(str, Path("/usr/lib/google-cloud-sdk/bin").glob("kubectl.1.*")), reverse=True
    )
    return [c for c in found if c]


@dataclass(frozen=True)
class KubectlBinary:
    path: str
    minor: int

    @property
    def apply_flags(self) -> list[str]:
        """kubectl before 1.29 validates ``apply`` against the protobuf OpenAPI v2 document,
        which kubesim does not serve; 1.29+ uses the v3 documents it does serve."""
        return [] if self.minor >= 29 else ["--validate=false"]


def _kubectl_minor(candidate: str) -> int | None:
    try:
        done = subprocess.run(
            [candidate, "version", "--client", "-o", "json"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return int(json.loads(done.stdout)["clientVersion"]["minor"].rstrip("+"))


@pytest.fixture(scope="session")
def kubectl_bin() -> KubectlBinary:
    """A kubectl that runs offline: $KUBECTL when set, else the newest of the one on PATH and
    the gcloud SDK's versioned ones (the tests follow today's kubectl, not the oldest).

    On the project's machines /usr/bin/kubectl is the google-cloud-sdk dispatcher (package
    ``kubectl``, 1.32), which runs offline, beside kubectl.1.27 to 1.33; Debian's
    ``kubernetes-client`` (1.20) conflicts with it.
    """
    found: list[KubectlBinary] = []
    for candidate in _kubectl_candidates():
        minor = _kubectl_minor(candidate)
        if minor is not None:
            found.append(KubectlBinary(candidate, minor))
            if candidate == os.environ.get("KUBECTL"):
                return found[-1]
    if found:
        return max(found, key=lambda k: k.minor)  # the first of the newest: PATH wins a tie
    message = "no working kubectl (install the 'kubectl' package or set KUBECTL)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture
def kubectl(kubectl_bin: KubectlBinary) -> Callable[..., Awaitable[tuple[int, str, str]]]:
    """``await kubectl(kubeconfig, *args)`` → (returncode, stdout, stderr), HOME isolated."""

    async def run(kubeconfig: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
        env = dict(os.environ, HOME=str(kubeconfig.parent), KUBECONFIG=str(kubeconfig))
        proc = await asyncio.create_subprocess_exec(
            kubectl_bin.path, "--kubeconfig", str(kubeconfig),
            "--cache-dir", str(kubeconfig.parent / "cache"), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    return run
