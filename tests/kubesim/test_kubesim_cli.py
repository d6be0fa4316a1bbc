"""The emulator as a separate process: ``python -m multusd.kubesim serve`` plus the control CLI."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client, config

from multusd.kubesim.cli import main


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "multusd.kubesim", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_serve_seed_control_and_sigterm(kubesim_process: Any):
    kubeconfig: Path = kubesim_process.kubeconfig
    cfg = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with client.ApiClient(cfg) as api:
        v1 = client.CoreV1Api(api)
        seeded = await v1.read_namespaced_pod("seeded", "demo")
        # Seeds keep their status (a running pod with an IP), unlike an API create.
        assert seeded.status.pod_ip == "10.0.0.5"

        rc, out, err = await run_cli("error", "--kubeconfig", str(kubeconfig), "--code", "500",
                                     "--verb", "list", "--count", "1")  # fmt: skip
        assert rc == 0, err
        assert json.loads(out)["errors"][0]["code"] == 500
        status = None
        try:
            await v1.list_namespaced_pod("demo")
        except client.exceptions.ApiException as exc:
            status = exc.status
        assert status == 500

        rc, out, err = await run_cli("hide", "--kubeconfig", str(kubeconfig), "demo", "seeded")
        assert rc == 0, err
        assert (await v1.list_namespaced_pod("demo")).items == []
        rc, out, err = await run_cli("faults", "--kubeconfig", str(kubeconfig), "clear")
        assert rc == 0, err
        assert len((await v1.list_namespaced_pod("demo")).items) == 1

        rc, out, err = await run_cli("stats", "--kubeconfig", str(kubeconfig), "--log", "3")
        assert rc == 0, err
        stats = json.loads(out)
        counts = {(r["verb"], r["resource"]): r["count"] for r in stats["requests"]}
        assert counts[("list", "pods")] == 3
        assert counts[("get", "pods")] == 1

    sa = kubesim_process.workdir / "sa"
    assert (sa / "token").read_text() == "kubesim-token"
    assert not (sa / "ca.crt").exists()  # plain http: no CA

    proc = kubesim_process.proc
    proc.send_signal(signal.SIGTERM)
    async with asyncio.timeout(15):
        assert await proc.wait() == 0


def test_usage_errors_exit_2(capsys: Any):
    assert main([]) == 2
    assert main(["serve"]) == 2  # --kubeconfig-out is required
    assert main(["bogus"]) == 2
