"""The client must not drag kubernetes_asyncio in: importing it loads every generated model
(RSS 33 → 71 MiB), and the daemon has to idle within upstream's ~44 MiB.

Checked in a fresh interpreter, because the test process itself may have imported it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys
import multusd.k8s.client, multusd.k8s.errors, multusd.k8s.kubeconfig, multusd.k8s.ratelimit
from multusd.k8s.client import KubeClient, load_cluster_config
cfg = load_cluster_config(sys.argv[1], {})
client = KubeClient(cfg)
cfg.ssl_context()
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("kubernetes_asyncio", "kubernetes"))
print(",".join(heavy))
"""


def test_kubernetes_asyncio_is_never_imported(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(kubeconfig)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
