"""A bounded, seeded fuzz of ``/cni`` and ``/delegate``: every body is answered, with a
success or a CNI error object -- never an HTTP 500 -- and the daemon logs no traceback.

The bodies (``tests/e2e/fuzzbodies.py``, shared with the long run) start from a valid request
and are mutated at every level. ``MULTUSD_FUZZ_SEED`` and ``MULTUSD_FUZZ_BODIES`` change the
run; the longer campaign (100,000 bodies), and the rate the daemon answers them at, is
``python -m bench faults --only fuzz``: how fast is a figure, not a pass mark.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path

from tests.e2e.faults import log_barrier, no_traceback, post
from tests.e2e.fuzzbodies import acceptable, body
from tests.e2e.harness import Daemon

StartDaemon = Callable[..., Awaitable[Daemon]]

SEED = int(os.environ.get("MULTUSD_FUZZ_SEED", "1313"))
BODIES = int(os.environ.get("MULTUSD_FUZZ_BODIES", "3000"))


async def test_fuzzed_requests_never_get_a_500_or_a_traceback(
    start_daemon: StartDaemon, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    rng = random.Random(SEED)
    cases = [body(rng) for _ in range(BODIES)]
    paths = ["/delegate" if rng.random() < 0.1 else "/cni" for _ in cases]
    bad: list[tuple[int, bytes, bytes]] = []
    unanswered: list[tuple[str, bytes]] = []
    answered = 0
    sem = asyncio.Semaphore(16)

    async def one(data: bytes, headers: dict[str, str], path: str) -> None:
        nonlocal answered
        async with sem:
            try:
                response = await post(daemon.socket_path, data, headers=headers, path=path)
            except (OSError, TimeoutError, ValueError, IndexError) as exc:
                unanswered.append((repr(exc), data[:300]))  # reset, hung, or not HTTP
                return
            answered += 1
            if not acceptable(response.status, response.body):
                bad.append((response.status, data[:300], response.body[:300]))

    await asyncio.gather(
        *(one(data, headers, path) for (data, headers), path in zip(cases, paths, strict=True))
    )
    assert unanswered == [], f"{len(unanswered)} of {BODIES} got no answer: {unanswered[:5]}"
    assert answered == BODIES
    assert bad == [], f"{len(bad)} of {BODIES} answers were not a CNI error object: {bad[:5]}"
    assert (await daemon.request("GET", "/healthz"))[0] == 200
    await log_barrier(daemon)  # the log writer is a thread
    assert no_traceback(daemon.log()), daemon.log()[-5000:]
