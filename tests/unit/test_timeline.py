"""multusd.timeline: the phases of one request, in order, and the parts inside them."""

from __future__ import annotations

import asyncio

from multusd import timeline
from multusd.metrics import Recorder
from multusd.timeline import Phase, note_part, note_phase, phases_text


async def test_phases_are_collected_across_the_requests_tasks_and_only_inside_it() -> None:
    recorder = Recorder()
    note_phase("before", 1.0)  # no timeline: nowhere to go, and no error
    with timeline.timeline() as phases:
        note_phase("decode", 0.001)

        async def work() -> None:
            with recorder.phase("delegate", plugin="bridge"):
                await asyncio.sleep(0)
            with timeline.phase("delegate_del[bridge]"):
                await asyncio.sleep(0)

        await asyncio.create_task(work())  # the queue runs a request's work in a task of its own
    assert [p.name for p in phases] == ["decode", "delegate[bridge]", "delegate_del[bridge]"]
    note_phase("after", 1.0)
    assert len(phases) == 3


async def test_a_part_belongs_to_the_phase_open_where_it_is_noted() -> None:
    with timeline.timeline() as phases:
        note_part("find[bridge]", 0.001)  # outside any phase: a phase of its own

        async def plugin() -> None:  # a task of the phase's, as a gathered plugin run would be
            note_part("run[bridge]", 0.002)

        with timeline.phase("delegate[net]"):
            note_part("spawn[bridge]", 0.001)
            await asyncio.create_task(plugin())
        with timeline.part("cache_write"):
            pass
    assert [(p.name, [n for n, _ in p.parts]) for p in phases] == [
        ("find[bridge]", []),
        ("delegate[net]", ["spawn[bridge]", "run[bridge]"]),
        ("cache_write", []),
    ]


def test_the_text_names_each_phase_its_parts_and_what_none_covers() -> None:
    delegate = Phase(
        "delegate[bridge]", 0.0247, [("spawn[bridge]", 0.0008), ("run[bridge]", 0.023)]
    )
    text = phases_text([Phase("decode", 0.0004), delegate], total=0.0263)
    assert text == (
        "decode 0.4ms, delegate[bridge] 24.7ms (spawn[bridge] 0.8ms, run[bridge] 23.0ms), "
        "other 1.2ms"
    )
    assert phases_text([], total=0.001) == "other 1.0ms"


def test_bench_phases_reads_the_line_back() -> None:
    # bench/phases.py aggregates these lines: the two must agree on the format.
    from bench.phases import parse_line

    delegate = Phase("delegate[net]", 0.018, [("spawn[bridge]", 0.001), ("run[bridge]", 0.016)])
    text = phases_text([Phase("decode", 0.0004), delegate], total=0.0204)
    phases, parts = parse_line(text)
    assert phases == [("decode", 0.4), ("delegate[net]", 18.0), ("other", 2.0)]
    assert parts == {"delegate[net] / spawn[bridge]": [1.0], "delegate[net] / run[bridge]": [16.0]}
