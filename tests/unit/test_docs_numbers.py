"""Every default and timeout the operations docs state, against the code's constant.

Why: the docs are read by whoever runs the daemon at 3 a.m.; a number there that drifted from
the code (a shutdown said to take 16 s that takes 18, a STATUS said to wait 60 s that answers at
once) is worse than none. Each row names the sentence (a regular expression whose one group is
the number) and the constant it must equal; a sentence that no longer matches fails too, so a
rewrite of the docs comes with its row here. The config keys' defaults are held to the models by
tests/unit/config/test_configuration_doc.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cni_shim import readiness as shim_readiness
from multusd.config.daemon import DaemonConfig
from multusd.config.manager import ManagerSettings
from multusd.config.readiness import ReadinessSettings
from multusd.daemon import ShutdownSettings
from multusd.k8s.events import EVENTS_DRAIN
from multusd.logs.writer import STOP_TIMEOUT

DOCS = Path(__file__).resolve().parents[2] / "docs"
SHUTDOWN = ShutdownSettings()
CONFIG = DaemonConfig()

OPS, REL = "operations.md", "reliability.md"
STARTUP = ReadinessSettings().startup_timeout
ATTEMPTS = ManagerSettings().find_attempts
CACHES = CONFIG.cache_sync_timeout
WAITS = r"the waits above last up to"

ROWS: list[tuple[str, str, float]] = [
    # start-up
    (OPS, r"second for up to (\d+) s\. Still missing", STARTUP),
    (OPS, r"\((\d+) tries, 1 s apart\)", ATTEMPTS),
    (OPS, r"`cacheSyncTimeoutSeconds` \((\d+) s\)", CACHES),
    (OPS, WAITS + r" (\d+) s, \d+ s and \d+ s", STARTUP),
    (OPS, WAITS + r" \d+ s, (\d+) s and \d+ s", ATTEMPTS),
    (OPS, WAITS + r" \d+ s, \d+ s and (\d+) s", CACHES),
    # shutdown
    (OPS, r"ADD, CHECK or GC wait \(up to (\d+) s\)", shim_readiness.POLL_TIMEOUT),
    (OPS, r"In-flight requests finish, for up to (\d+) s", SHUTDOWN.drain_timeout),
    (OPS, r"A request still running then gets (\d+) s more", SHUTDOWN.cancel_timeout),
    (OPS, r"an ADD is rolled back\) and gets (\d+) s for", SHUTDOWN.cancel_timeout),
    (OPS, r"queued events get (\d+) s to be posted", EVENTS_DRAIN),
    (OPS, r"queued log lines are written out \((\d+) s at most\)", STOP_TIMEOUT),
    (OPS, r"These waits add up to (\d+) s at most", SHUTDOWN.longest),
    (OPS, r"process ends (\d+) s after the signal", SHUTDOWN.exit_deadline),
    (REL, r"the ADD rolled back \((\d+) s for that at most", 2 * SHUTDOWN.cancel_timeout),
    (REL, r"after the drain \((\d+) s\)", SHUTDOWN.drain_timeout),
    # rolling restarts
    (OPS, r"\*restart window\* \((\d+) minutes later\)", shim_readiness.RESTART_WINDOW / 60),
]


@pytest.mark.parametrize(("doc", "sentence", "value"), ROWS, ids=[r[1] for r in ROWS])
def test_the_docs_state_the_codes_number(doc: str, sentence: str, value: float) -> None:
    text = " ".join((DOCS / doc).read_text().split())  # sentences across line breaks
    found = re.search(sentence, text)
    assert found is not None, f"docs/{doc} no longer says {sentence!r}: update this row"
    assert float(found[1]) == value, f"docs/{doc}: {found[0]!r}, the code has {value}"


def test_the_daemons_own_docstring_states_the_same_shutdown() -> None:
    import multusd.daemon

    doc = " ".join((multusd.daemon.__doc__ or "").split())
    found = re.search(r"That is (\d+) s at most", doc)
    assert found is not None and float(found[1]) == SHUTDOWN.longest
