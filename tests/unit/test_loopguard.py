"""The loop guard sees a callback that blocks its loop, and only its own loop's."""

from __future__ import annotations

import asyncio
import time

from tests.loopguard import watching


async def _blocks(seconds: float) -> None:
    time.sleep(seconds)  # the blocking call the guard exists to catch
    await asyncio.sleep(0)


def test_a_blocking_callback_is_reported_and_another_loops_are_not() -> None:
    mine, other = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        with watching(mine, 0.05) as slow, watching(other, 0.05) as others:
            other.run_until_complete(_blocks(0.5))  # reported to ``others`` only
            assert slow.found == []
            mine.run_until_complete(_blocks(0.5))
        assert len(others.found) >= 1
    finally:
        mine.close()
        other.close()
    assert slow.found
    assert "_blocks()" in slow.found[0] and " took " in slow.found[0]
    assert not mine.get_debug()  # put back as it was
