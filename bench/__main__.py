"""``python -m bench [NAME ...]``: run the named benchmarks (default: all)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from bench import (
    concurrency,
    host_shim,
    informer,
    kube_requests,
    kubesim_scale,
    memory,
    pod_lookup,
    profile_add,
    qps_storm,
    readiness_stat,
    skeleton,
)

BENCHMARKS: dict[str, Callable[[], Any]] = {
    "skeleton": skeleton.main,
    "kubesim_scale": kubesim_scale.main,
    "kube_requests": kube_requests.main,
    "informer": informer.main,
    "host_shim": host_shim.main,
    "pod_lookup": pod_lookup.main,
    "qps_storm": qps_storm.main,
    "memory": memory.main,  # after qps_storm: its chart shows the storms' peaks
    "readiness_stat": readiness_stat.main,
    "concurrency": concurrency.main,
    "profile_add": profile_add.main,
}


def main(argv: list[str]) -> int:
    names = argv or list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
        return 2
    for name in names:
        print(f"== {name}")
        BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
