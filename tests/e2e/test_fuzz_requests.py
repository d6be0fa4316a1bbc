"""A bounded, seeded fuzz of ``/cni`` and ``/delegate``: whatever arrives, the answer is a
success or a CNI error object -- never an HTTP 500 -- and the daemon logs no traceback.

Bodies start from a valid request and are mutated at every level: the JSON envelope, the env
map (keys and values drawn from the troublesome: lone surrogates, NUL, paths, ``..``, very long
strings), the base64 config and the JSON inside it, and finally the raw bytes, with the odd
``Content-Encoding``. ``MULTUSD_FUZZ_SEED`` and ``MULTUSD_FUZZ_BODIES`` change the run; the
longer campaign lives in ``bench/``.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.e2e.faults import no_traceback, post
from tests.e2e.harness import Daemon

StartDaemon = Callable[..., Awaitable[Daemon]]

SEED = int(os.environ.get("MULTUSD_FUZZ_SEED", "1313"))
BODIES = int(os.environ.get("MULTUSD_FUZZ_BODIES", "3000"))
TIME_BUDGET = 150.0  # seconds; the run stops early rather than overrun CI

ATOMS = [
    "",
    "eth0",
    "net1",
    "abc",
    "ADD",
    "DEL",
    "CHECK",
    "GC",
    "STATUS",
    "VERSION",
    "/",
    "..",
    "../../etc/x",
    "/tmp/x",
    "a/b",
    "\ud800",
    "\udfff",
    "\x00",
    "\u2028",
    "é",
    "😀",
    " ",
    "\t",
    "=",
    ";",
    ":",
    "K8S_POD_NAME",
    "K8S_POD_NAMESPACE",
    "IgnoreUnknown=1",
    "-1",
    "1e999",
    "null",
    "x" * 300,
]
ENV_KEYS = ["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"]


def _text(rng: random.Random) -> str:
    return "".join(rng.choice(ATOMS) for _ in range(rng.randint(0, 4)))


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**63, 1.5, 1e300])
    if kind in (3, 4):
        return _text(rng)
    if kind == 5:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {_text(rng): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _env(rng: random.Random) -> dict[str, Any]:
    env: dict[str, Any] = {
        "CNI_COMMAND": rng.choice(["ADD", "DEL", "CHECK", "GC", "STATUS", _text(rng)]),
        "CNI_CONTAINERID": rng.choice(["c" + str(rng.randrange(10**6)), _text(rng)]),
        "CNI_NETNS": rng.choice(["/nonexistent/ns" + str(rng.randrange(100)), _text(rng)]),
        "CNI_IFNAME": rng.choice(["eth0", "net1", _text(rng)]),
        "CNI_ARGS": rng.choice(
            [
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p",
                f"K8S_POD_NAMESPACE={_text(rng)};K8S_POD_NAME={_text(rng)}",
                _text(rng),
            ]
        ),
    }
    for _ in range(rng.randint(0, 3)):
        action = rng.randrange(3)
        key = rng.choice([*ENV_KEYS, _text(rng)])
        if action == 0:
            env.pop(key, None)
        elif action == 1:
            env[key] = _text(rng)
        else:
            env[key] = _value(rng)  # not a string at all
    return env


def _config(rng: random.Random) -> Any:
    conf: dict[str, Any] = {
        "cniVersion": rng.choice(["1.0.0", "1.1.0", "0.4.0", "0.3.1", "", _text(rng)]),
        "name": rng.choice(["multus-cni-network", _text(rng)]),
        "type": "multus-shim",
    }
    for _ in range(rng.randint(0, 3)):
        conf[rng.choice(["capabilities", "runtimeConfig", "args", "prevResult", _text(rng)])] = (
            _value(rng)
        )
    raw = json.dumps(conf).encode()
    choice = rng.randrange(10)
    if choice == 0:
        raw = raw[: rng.randrange(len(raw) + 1)]
    elif choice == 1:
        return _value(rng)  # not base64 text at all
    elif choice == 2:
        return base64.b64encode(raw).decode()[:-1]  # broken padding
    return base64.b64encode(raw).decode()


def body(rng: random.Random) -> tuple[bytes, dict[str, str]]:
    envelope: dict[str, Any] = {"env": _env(rng), "config": _config(rng)}
    if rng.random() < 0.1:
        envelope["interfaceAttributes"] = _value(rng)
    if rng.random() < 0.1:
        envelope = _value(rng)  # type: ignore[assignment]
    data = json.dumps(envelope).encode()
    if rng.random() < 0.2:  # byte-level damage
        data = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            if data:
                data[rng.randrange(len(data))] = rng.randrange(256)
        data = bytes(data)
    headers: dict[str, str] = {}
    roll = rng.random()
    if roll < 0.05:
        headers["Content-Encoding"] = "gzip"
        data = gzip.compress(data) if rng.random() < 0.5 else data
    elif roll < 0.07:
        headers["Content-Encoding"] = "deflate"
    return data, headers


def _cni_error(raw: bytes) -> bool:
    try:
        error = json.loads(raw)
    except ValueError:
        return False
    if not isinstance(error, dict):
        return False
    code, msg = error.get("code"), error.get("msg")
    return isinstance(code, int) and code > 0 and isinstance(msg, str) and bool(msg)


def _acceptable(status: int, raw: bytes) -> bool:
    """A success, or a 4xx whose body is a CNI error object (``server.listener`` answers even
    HTTP that aiohttp's parser rejects that way)."""
    return status == 200 or (400 <= status < 500 and _cni_error(raw))


async def test_fuzzed_requests_never_get_a_500_or_a_traceback(
    start_daemon: StartDaemon, conflist_file: Path
) -> None:
    daemon = await start_daemon(clusterNetwork=str(conflist_file))
    rng = random.Random(SEED)
    cases = [body(rng) for _ in range(BODIES)]
    paths = ["/delegate" if rng.random() < 0.1 else "/cni" for _ in cases]
    bad: list[tuple[int, bytes, bytes]] = []
    sem = asyncio.Semaphore(16)
    stop_at = time.monotonic() + TIME_BUDGET
    sent = 0

    async def one(data: bytes, headers: dict[str, str], path: str) -> None:
        nonlocal sent
        async with sem:
            if time.monotonic() > stop_at:
                return
            sent += 1
            response = await post(daemon.socket_path, data, headers=headers, path=path)
            if not _acceptable(response.status, response.body):
                bad.append((response.status, data[:300], response.body[:300]))

    await asyncio.gather(
        *(one(data, headers, path) for (data, headers), path in zip(cases, paths, strict=True))
    )
    assert sent >= min(BODIES, 500), f"only {sent} bodies in {TIME_BUDGET:g}s"
    assert bad == [], f"{len(bad)} of {sent} answers were not a CNI error object: {bad[:5]}"
    assert (await daemon.request("GET", "/healthz"))[0] == 200
    await asyncio.sleep(0.5)  # the log writer is a thread
    assert no_traceback(daemon.log()), daemon.log()[-5000:]
