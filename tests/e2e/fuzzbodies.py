"""The fuzzer's bodies and its judge, shared by the bounded CI test
(``tests/e2e/test_fuzz_requests.py``) and the long run (``bench/faults.py``): one definition, so
the 100,000 bodies of the long run are the same kind as the test's 3,000 (the same seed gives
the same bodies in both).

Bodies start from a valid ``/cni`` request and are mutated at every level: the JSON envelope,
the env map (keys and values drawn from the troublesome: lone surrogates, NUL, paths, ``..``,
very long strings), the base64 config and the JSON inside it, and finally the raw bytes, with
the odd ``Content-Encoding``. The judge (:func:`acceptable`) is what the daemon owes any of
them: a success, or a 4xx whose body is a CNI error object.
"""

from __future__ import annotations

import base64
import gzip
import json
import random
from typing import Any

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
    """One fuzzed request: its bytes and the headers to send with them."""
    envelope: Any = {"env": _env(rng), "config": _config(rng)}
    if rng.random() < 0.1:
        envelope["interfaceAttributes"] = _value(rng)
    if rng.random() < 0.1:
        envelope = _value(rng)
    data = json.dumps(envelope).encode()
    if rng.random() < 0.2:  # byte-level damage
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            if damaged:
                damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        data = bytes(damaged)
    headers: dict[str, str] = {}
    roll = rng.random()
    if roll < 0.05:
        headers["Content-Encoding"] = "gzip"
        data = gzip.compress(data) if rng.random() < 0.5 else data
    elif roll < 0.07:
        headers["Content-Encoding"] = "deflate"
    return data, headers


def cni_error(raw: bytes) -> bool:
    """Whether ``raw`` is a CNI error object: a positive integer ``code`` and a ``msg``."""
    try:
        error = json.loads(raw)
    except ValueError:
        return False
    if not isinstance(error, dict):
        return False
    code, msg = error.get("code"), error.get("msg")
    return isinstance(code, int) and code > 0 and isinstance(msg, str) and bool(msg)


def acceptable(status: int, raw: bytes) -> bool:
    """A success, or a 4xx whose body is a CNI error object. The fuzzer's HTTP framing is always
    valid (only bodies and ``Content-Encoding`` vary), so every answer comes from the daemon's
    application; HTTP that cannot be parsed gets aiohttp's own text 400 (docs/compatibility.md,
    row 47), which no fuzzed request provokes."""
    return status == 200 or (400 <= status < 500 and cni_error(raw))
