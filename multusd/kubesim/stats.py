"""What clients asked for: a bounded request log and counters per verb/resource/subresource.

Tests assert on these ("the daemon listed pods once, then only watched"), and benchmarks read
them to count API calls per CNI ADD. Requests are counted when they arrive, so an open watch is
visible to a test before it ends; the code and duration are filled in when the response is done.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(slots=True)
class RequestRecord:
    """One API request as the log keeps it (verbs use the apiserver's RBAC names)."""

    started: float
    method: str
    path: str
    query: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    user_agent: str
    accept: str = ""
    code: int = 0
    duration: float = 0.0
    content_type: str = ""  # of the response (shows which encoding was negotiated)
    body_type: str = ""  # Content-Type of the request body, if any (kubectl sends protobuf)
    user: str = ""  # who sent it (multusd.kubesim.authn): a token's user or a certificate's CN


class Stats:
    def __init__(self, *, log_limit: int = 10_000) -> None:
        self._log: deque[RequestRecord] = deque(maxlen=log_limit)
        self._requests: Counter[tuple[str, str, str]] = Counter()
        self._codes: Counter[tuple[str, str, int]] = Counter()
        self.open_watches = 0

    def begin(self, record: RequestRecord) -> RequestRecord:
        self._log.append(record)
        if record.verb:
            self._requests[(record.verb, record.resource, record.subresource)] += 1
        return record

    def finish(self, record: RequestRecord, code: int) -> None:
        record.code = code
        record.duration = time.monotonic() - record.started
        if record.verb:
            self._codes[(record.verb, record.resource, code)] += 1

    def count(
        self,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
    ) -> int:
        """Requests seen so far; a None filter matches anything ("" means no subresource)."""
        return sum(
            n
            for (v, r, s), n in self._requests.items()
            if (verb is None or v == verb)
            and (resource is None or r == resource)
            and (subresource is None or s == subresource)
        )

    def count_code(self, code: int, verb: str | None = None, resource: str | None = None) -> int:
        return sum(
            n
            for (v, r, c), n in self._codes.items()
            if c == code and (verb is None or v == verb) and (resource is None or r == resource)
        )

    def requests(self, limit: int | None = None) -> list[RequestRecord]:
        items = list(self._log)
        return items[-limit:] if limit else items

    def reset(self) -> None:
        self._log.clear()
        self._requests.clear()
        self._codes.clear()

    def to_dict(self, *, log_limit: int = 100) -> dict[str, Any]:
        return {
            "requests": [
                {"verb": v, "resource": r, "subresource": s, "count": n}
                for (v, r, s), n in sorted(self._requests.items())
            ],
            "codes": [
                {"verb": v, "resource": r, "code": c, "count": n}
                for (v, r, c), n in sorted(self._codes.items())
            ],
            "openWatches": self.open_watches,
            "log": [asdict(rec) for rec in self.requests(log_limit)] if log_limit else [],
        }
