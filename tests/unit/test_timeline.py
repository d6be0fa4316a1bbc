"""multusd.metrics' request timeline: the phases of one request, in order, for its debug line."""

from __future__ import annotations

import asyncio

from multusd.metrics import Recorder, note_phase, phases_text, timeline


async def test_phases_are_collected_across_the_requests_tasks_and_only_inside_it() -> None:
    recorder = Recorder()
    note_phase("before", 1.0)  # no timeline: nowhere to go, and no error
    with timeline() as phases:
        note_phase("decode", 0.001)

        async def work() -> None:
            with recorder.phase("delegate", plugin="bridge"):
                await asyncio.sleep(0)
            note_phase("delegate_del[bridge]", 0.002)

        await asyncio.create_task(work())  # the queue runs a request's work in a task of its own
    assert [name for name, _ in phases] == ["decode", "delegate[bridge]", "delegate_del[bridge]"]
    note_phase("after", 1.0)
    assert len(phases) == 3


def test_the_text_names_each_phase_and_what_none_covers() -> None:
    text = phases_text([("decode", 0.0004), ("delegate[bridge]", 0.0247)], total=0.0263)
    assert text == "decode 0.4ms, delegate[bridge] 24.7ms, other 1.2ms"
    assert phases_text([], total=0.001) == "other 1.0ms"
