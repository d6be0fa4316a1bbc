"""``python -m bench [NAME ...] [--option ...]``: run the named benchmarks (default: all that
need no options). Everything from the first ``-`` argument on goes to the one named benchmark
that takes options (``sidebyside --daemon PATH --shim PATH``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from bench import (
    concurrency,
    cri_interop,
    faults,
    host_shim,
    informer,
    interop,
    kube_requests,
    kubesim_scale,
    memory,
    memory_limit,
    phases,
    pod_lookup,
    profile_add,
    qps_storm,
    readiness_stat,
    relist_memory,
    sidebyside,
    skeleton,
)

BENCHMARKS: dict[str, Callable[[], Any]] = {
    "skeleton": skeleton.main,
    "kubesim_scale": kubesim_scale.main,
    "kube_requests": kube_requests.main,
    "informer": informer.main,
    "relist_memory": relist_memory.main,
    "host_shim": host_shim.main,
    "pod_lookup": pod_lookup.main,
    "qps_storm": qps_storm.main,
    "memory": memory.main,  # after qps_storm: its chart shows the storms' peaks
    "readiness_stat": readiness_stat.main,
    "concurrency": concurrency.main,
    "profile_add": profile_add.main,
    "phases": phases.main,  # our daemon's per-phase wall time (also in WITH_OPTIONS)
    "faults": faults.main,  # issue 13's long runs, about 12 min (also in WITH_OPTIONS)
    "memory_limit": memory_limit.main,  # ours in a 50 MiB cgroup (also in WITH_OPTIONS)
}
WITH_OPTIONS: dict[str, Callable[[Sequence[str]], Any]] = {
    "faults": faults.main,  # --quick, --only fuzz,soak,api, --no-publish, --republish
    "sidebyside": sidebyside.main,  # needs the other side's binaries: never in the default run
    "interop": interop.main,  # the drop-in check against a daemon and shim given by path
    "cri_interop": cri_interop.main,  # the same pairings, through a real containerd
    "memory_limit": memory_limit.main,  # --daemon PATH --shim PATH: another daemon in the cgroup
    "phases": phases.main,  # --interpreter NAME=DAEMON: our per-phase wall time, per interpreter
}


def main(argv: list[str]) -> int:
    split = next((i for i, a in enumerate(argv) if a.startswith("-")), len(argv))
    names, options = argv[:split] or list(BENCHMARKS), argv[split:]
    known = {**BENCHMARKS, **WITH_OPTIONS}
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(known)}")
        return 2
    takers = [n for n in names if n in WITH_OPTIONS]
    if options and len(takers) != 1:
        print(f"options {' '.join(options)} need exactly one of: {', '.join(WITH_OPTIONS)}")
        return 2
    for name in names:
        print(f"== {name}")
        if name in WITH_OPTIONS:
            WITH_OPTIONS[name](options)
        else:
            BENCHMARKS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
