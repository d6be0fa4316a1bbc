"""ConfigManager against real directories, real inotify (watchfiles) and real atomic writes."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from multusd.config.daemon import DaemonConfig, parse_daemon_config
from multusd.config.manager import ConfigManager, ManagerSettings
from multusd.config.static import install_static_config
from multusd.errors import EXIT_READINESS_LOST, StartupError
from tests.waits import eventually, until_watched

FAST = ManagerSettings(
    find_attempts=200,
    find_interval=0.02,
    step_ms=10,
    debounce_ms=50,
    recheck_interval=0.1,
    primary_gone_grace=0.3,
)
MYCNI = {"cniVersion": "0.4.0", "name": "mycni-name", "type": "mycni", "ipam": {}, "dns": {}}


@pytest.fixture
def confdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="mgr", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def daemon_config(confdir: Path, **extra: Any) -> tuple[DaemonConfig, dict[str, Any]]:
    raw = {
        "cniVersion": "0.4.0",
        "multusAutoconfigDir": str(confdir),
        "cniConfigDir": str(confdir),
        **extra,
    }
    return parse_daemon_config(json.dumps(raw).encode())


def write_json(path: Path, doc: dict[str, Any]) -> None:
    path.write_text(json.dumps(doc))


def replace_json(path: Path, doc: dict[str, Any]) -> None:
    """An atomic replace, as well-behaved CNI installers do: write aside, rename over."""
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(json.dumps(doc))
    os.rename(tmp, path)


def expected(path: Path, **fields: Any) -> bytes:
    caps = fields.pop("capabilities", None)
    head = f'{{"capabilities":{json.dumps(caps, separators=(",", ":"))},' if caps else "{"
    return (
        f'{head}"cniVersion":"0.4.0","name":"multus-cni-network",'
        f'"clusterNetwork":"{path}","type":"multus-shim"}}'
    ).encode()


def read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


class Clock:
    """The manager's monotonic clock, moved by the test: a primary's grace runs out when the
    test says so, however slow the machine is, and not before."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def after_passes(manager: ConfigManager, count: int) -> None:
    """Wait until the watch has finished ``count`` passes (batches or ticks, each one's sync
    done) begun after this call: what it would do about a change made before, it has done by
    then (inotify queued the change at once; watchfiles' thread hands it on within a tick).
    One pass more is awaited than asked: the first to end may have begun before the call."""
    start = manager.passes
    await eventually(
        lambda: manager.passes > start + count, what=f"{count} passes of the config watch"
    )


@asynccontextmanager
async def watching(manager: ConfigManager) -> AsyncIterator[asyncio.Task[None]]:
    """The supervisor's sequence: find the primary, write, watch; cancel the watch on exit."""
    async with manager:
        await manager.wait_for_primary()
        await manager.write_config()
        task = asyncio.create_task(manager.watch())
        try:
            await until_watched(os.path.dirname(manager.primary_path))  # the watch is armed
            yield task
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_generates_from_the_delegated_config(confdir: Path) -> None:
    primary = confdir / "00-mycni.conf"
    write_json(primary, MYCNI)
    config, raw = daemon_config(confdir, multusMasterCNI="00-mycni.conf")
    async with ConfigManager(config, raw, settings=FAST) as manager:
        await manager.wait_for_primary()
        written = await manager.write_config()
        assert written == confdir / "00-multus.conf"
        assert written.read_bytes() == expected(primary)
        assert written.stat().st_mode & 0o777 == 0o644
        assert manager.primary_path == str(primary)
    assert not written.exists()  # upstream's default: removed on exit


async def test_waits_for_a_primary_created_later(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="multusd.config")
    config, raw = daemon_config(confdir)

    async def install_later() -> None:
        await eventually(lambda: "waiting for a primary CNI config" in caplog.text)
        write_json(confdir / "10-later.conf", MYCNI)

    async with ConfigManager(config, raw, settings=FAST) as manager:
        installer = asyncio.create_task(install_later())
        await manager.wait_for_primary()
        await installer
        assert manager.primary_path == str(confdir / "10-later.conf")


async def test_waits_for_a_directory_created_later(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="multusd.config")
    later = confdir / "later"
    config, raw = daemon_config(later)

    async def install_later() -> None:
        await eventually(lambda: "waiting for a primary CNI config" in caplog.text)
        later.mkdir()
        write_json(later / "10-x.conflist", {**MYCNI, "plugins": [{"type": "x"}]})

    async with ConfigManager(config, raw, settings=FAST) as manager:
        installer = asyncio.create_task(install_later())
        await manager.wait_for_primary()
        await installer
        assert manager.primary_path == str(later / "10-x.conflist")


async def test_gives_up_after_the_budget_with_exit_2(confdir: Path) -> None:
    (confdir / "00-multus.conf").write_text("{}")  # our own file never counts
    (confdir / "x.json").write_text("{}")
    config, raw = daemon_config(confdir)
    settings = ManagerSettings(find_attempts=3, find_interval=0.01)
    async with ConfigManager(config, raw, settings=settings) as manager:
        with pytest.raises(StartupError) as info:
            await manager.wait_for_primary()
    assert info.value.exit_code == EXIT_READINESS_LOST
    assert str(info.value) == (
        "failed to find the cluster master CNI plugin: "
        f"could not find a plugin configuration in {confdir} (looked 3 times, 0.01s apart, "
        "for a *.conf or *.conflist file not named 00-multus*)"
    )
    assert (confdir / "00-multus.conf").read_text() == "{}"  # never written: not removed


async def test_an_unset_autoconfig_dir_is_exit_2_at_once(confdir: Path) -> None:
    """Upstream lists "" and fails at once; waiting 120 s for "" to fill would be pointless."""
    config, raw = daemon_config(confdir)
    raw["multusAutoconfigDir"] = ""
    settings = ManagerSettings(find_attempts=1000, find_interval=1.0)
    async with ConfigManager(config, raw, settings=settings) as manager:
        with pytest.raises(StartupError) as info:
            await asyncio.wait_for(manager.wait_for_primary(), 30)
    assert info.value.exit_code == EXIT_READINESS_LOST
    assert "multusAutoconfigDir is not set" in str(info.value)
    assert "*.conf or *.conflist" in str(info.value)


async def test_version_mismatch_is_exit_2_with_upstream_text(confdir: Path) -> None:
    write_json(confdir / "00-mycni.conf", {**MYCNI, "cniVersion": "0.3.1"})
    config, raw = daemon_config(confdir, multusMasterCNI="00-mycni.conf")
    async with ConfigManager(config, raw, settings=FAST) as manager:
        with pytest.raises(StartupError) as info:
            await manager.wait_for_primary()
    assert info.value.exit_code == EXIT_READINESS_LOST
    assert str(info.value) == (
        "failed to load the primary CNI configuration as a multus delegate with error "
        "'delegate cni version is 0.3.1 while top level cni version is 0.4.0'"
    )


async def test_override_network_name_without_a_name_is_exit_2(confdir: Path) -> None:
    write_json(confdir / "10.conf", {"cniVersion": "0.4.0", "type": "x"})
    config, raw = daemon_config(confdir, overrideNetworkName=True)
    async with ConfigManager(config, raw, settings=FAST) as manager:
        with pytest.raises(StartupError, match=r"^could not override the network name: "):
            await manager.wait_for_primary()


async def test_force_cni_version_rewrites_the_primary(confdir: Path) -> None:
    primary = confdir / "10-mycni.conf"
    write_json(primary, {**MYCNI, "cniVersion": "0.3.1"})
    primary.chmod(0o600)
    config, raw = daemon_config(confdir, forceCNIVersion=True)
    async with ConfigManager(config, raw, settings=FAST) as manager:
        await manager.wait_for_primary()
    assert json.loads(primary.read_text())["cniVersion"] == "0.4.0"
    assert primary.stat().st_mode & 0o777 == 0o600  # the primary's mode is kept


async def test_regenerates_when_the_primary_changes_in_place(confdir: Path) -> None:
    primary = confdir / "00-mycni.conf"
    write_json(primary, MYCNI)
    config, raw = daemon_config(confdir, multusMasterCNI="00-mycni.conf")
    out = confdir / "00-multus.conf"
    async with watching(ConfigManager(config, raw, settings=FAST)):
        write_json(primary, {**MYCNI, "type": "mycni2", "capabilities": {"portMappings": True}})
        want = expected(primary, capabilities={"portMappings": True})
        await eventually(lambda: read(out) == want)


async def test_regenerates_when_the_primary_is_replaced_by_rename(confdir: Path) -> None:
    primary = confdir / "10-flannel.conflist"
    write_json(primary, {**MYCNI, "plugins": [{"type": "flannel"}]})
    config, raw = daemon_config(confdir)
    out = confdir / "00-multus.conf"
    async with watching(ConfigManager(config, raw, settings=FAST)):
        assert read(out) == expected(primary)
        plugins = [{"type": "flannel"}, {"type": "portmap", "capabilities": {"portMappings": True}}]
        replace_json(primary, {**MYCNI, "plugins": plugins})
        await eventually(
            lambda: read(out) == expected(primary, capabilities={"portMappings": True})
        )


async def test_the_primary_found_first_is_kept_as_upstream(confdir: Path) -> None:
    """A file that later sorts earlier does not move new pods; the real primary's rewrites
    are still followed."""
    primary = confdir / "20-second.conf"
    write_json(primary, MYCNI)
    config, raw = daemon_config(confdir)
    out = confdir / "00-multus.conf"
    manager = ConfigManager(config, raw, settings=FAST)
    async with watching(manager):
        replace_json(confdir / "10-first.conf", {**MYCNI, "capabilities": {"bandwidth": True}})
        write_json(primary, {**MYCNI, "capabilities": {"real": True}})
        # Generated from the rewrite, made after the newcomer: the newcomer was there when the
        # manager looked, and it kept the first primary; and so it does on the ticks after.
        await eventually(lambda: read(out) == expected(primary, capabilities={"real": True}))
        await after_passes(manager, 3)
        assert read(out) == expected(primary, capabilities={"real": True})


async def test_a_gone_primary_is_not_replaced_by_default(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_json(confdir / "10-a.conf", MYCNI)
    write_json(confdir / "20-b.conf", {**MYCNI, "capabilities": {"b": True}})
    config, raw = daemon_config(confdir)
    out = confdir / "00-multus.conf"
    clock = Clock()
    manager = ConfigManager(config, raw, settings=FAST, clock=clock)
    caplog.set_level(logging.ERROR, logger="multusd.config.manager")
    async with watching(manager):
        good = read(out)
        (confdir / "10-a.conf").unlink()
        await eventually(lambda: "keeping the last good" in caplog.text)  # the gap was seen
        clock.now += 10 * FAST.primary_gone_grace  # long past the grace of the opt-in mode
        await after_passes(manager, 3)  # each tick retries: a generation, no switch
        assert read(out) == good
        write_json(confdir / "10-a.conf", {**MYCNI, "capabilities": {"back": True}})
        want = expected(confdir / "10-a.conf", capabilities={"back": True})
        await eventually(lambda: read(out) == want)


async def test_follow_primary_config_lets_a_lexically_earlier_config_take_over(
    confdir: Path,
) -> None:
    write_json(confdir / "20-second.conf", MYCNI)
    config, raw = daemon_config(confdir, followPrimaryConfig=True)
    out = confdir / "00-multus.conf"
    manager = ConfigManager(config, raw, settings=FAST)
    async with watching(manager):
        replace_json(confdir / "10-first.conf", {**MYCNI, "capabilities": {"bandwidth": True}})
        want = expected(confdir / "10-first.conf", capabilities={"bandwidth": True})
        await eventually(lambda: read(out) == want)
        # A later-sorting newcomer changes nothing: a rewrite of the primary made after it is
        # generated from the same primary (the newcomer was there when the manager looked).
        write_json(confdir / "30-third.conf", {**MYCNI, "capabilities": {"x": True}})
        replace_json(confdir / "10-first.conf", {**MYCNI, "capabilities": {"seen": True}})
        want = expected(confdir / "10-first.conf", capabilities={"seen": True})
        await eventually(lambda: read(out) == want)
        await after_passes(manager, 3)  # nor do the ticks after
        assert read(out) == want


async def test_a_fixed_master_never_switches(confdir: Path) -> None:
    write_json(confdir / "20-mine.conf", MYCNI)
    config, raw = daemon_config(confdir, multusMasterCNI="20-mine.conf")
    out = confdir / "00-multus.conf"
    manager = ConfigManager(config, raw, settings=FAST)
    async with watching(manager):
        write_json(confdir / "10-other.conf", MYCNI)
        # A rewrite of the master made after the newcomer is generated from the master (the
        # newcomer was there when the manager looked), and so it stays on the ticks after.
        write_json(confdir / "20-mine.conf", {**MYCNI, "capabilities": {"seen": True}})
        want = expected(confdir / "20-mine.conf", capabilities={"seen": True})
        await eventually(lambda: read(out) == want)
        await after_passes(manager, 3)
        assert read(out) == want


async def test_own_writes_do_not_loop(confdir: Path) -> None:
    primary = confdir / "10-mycni.conf"
    write_json(primary, MYCNI)
    config, raw = daemon_config(confdir)
    out = confdir / "00-multus.conf"
    manager = ConfigManager(config, raw, settings=FAST)
    async with watching(manager):
        write_json(primary, {**MYCNI, "capabilities": {"a": True}})
        await eventually(lambda: read(out) == expected(primary, capabilities={"a": True}))
        inode = out.stat().st_ino
        # Five passes after our write (its events among them): any rewrite would change the
        # inode.
        await after_passes(manager, 5)
        assert out.stat().st_ino == inode
        assert not [p for p in confdir.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    "breakage",
    [b"", b'{"cniVersion": "0.4.0", "na', b'{"cniVersion": "0.3.1"}', None],
    ids=["truncated", "half-written", "incompatible", "deleted"],
)
async def test_an_unusable_primary_keeps_the_last_good_file(
    confdir: Path, breakage: bytes | None, caplog: pytest.LogCaptureFixture
) -> None:
    primary = confdir / "10-mycni.conf"
    write_json(primary, MYCNI)
    config, raw = daemon_config(confdir)
    out = confdir / "00-multus.conf"
    manager = ConfigManager(config, raw, settings=FAST)
    async with watching(manager):
        good = read(out)
        assert good == expected(primary)
        inode = out.stat().st_ino
        with caplog.at_level(logging.ERROR, logger="multusd.config.manager"):
            if breakage is None:
                primary.unlink()
            else:
                primary.write_bytes(breakage)
            await eventually(lambda: "keeping the last good" in caplog.text)
            await after_passes(manager, 3)  # each tick retries while the primary is unusable
        assert read(out) == good
        assert out.stat().st_ino == inode
        assert caplog.text.count("keeping the last good") == 1  # logged once per streak
        write_json(primary, {**MYCNI, "capabilities": {"fixed": True}})
        await eventually(lambda: read(out) == expected(primary, capabilities={"fixed": True}))


async def test_follow_primary_config_replaces_a_gone_primary_after_the_grace(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_json(confdir / "10-a.conf", MYCNI)
    write_json(confdir / "20-b.conf", {**MYCNI, "capabilities": {"b": True}})
    config, raw = daemon_config(confdir, followPrimaryConfig=True)
    out = confdir / "00-multus.conf"
    clock = Clock()
    manager = ConfigManager(config, raw, settings=FAST, clock=clock)
    caplog.set_level(logging.ERROR, logger="multusd.config.manager")
    async with watching(manager):
        good = read(out)
        (confdir / "10-a.conf").unlink()
        await eventually(lambda: "keeping the last good" in caplog.text)  # seen: the grace runs
        await after_passes(manager, 3)  # each tick looks again, within the grace: no switch
        assert read(out) == good  # within the grace: a rewrite may still come
        clock.now += FAST.primary_gone_grace  # the grace runs out
        want = expected(confdir / "20-b.conf", capabilities={"b": True})
        await eventually(lambda: read(out) == want)


async def test_a_primary_rewritten_within_the_grace_is_not_switched_away_from(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_json(confdir / "10-a.conf", MYCNI)
    write_json(confdir / "20-b.conf", MYCNI)
    config, raw = daemon_config(confdir, followPrimaryConfig=True)
    out = confdir / "00-multus.conf"
    clock = Clock()
    manager = ConfigManager(config, raw, settings=FAST, clock=clock)
    caplog.set_level(logging.ERROR, logger="multusd.config.manager")
    async with watching(manager):
        (confdir / "10-a.conf").unlink()
        await asyncio.sleep(0.1)  # the writer's gap between delete and re-create (a model)
        # However long the gap lasted, the manager saw it (or the grace would never start).
        await eventually(lambda: "keeping the last good" in caplog.text)
        write_json(confdir / "10-a.conf", {**MYCNI, "capabilities": {"back": True}})
        want = expected(confdir / "10-a.conf", capabilities={"back": True})
        await eventually(lambda: read(out) == want)
        clock.now += 10 * FAST.primary_gone_grace  # long past the grace
        # A rewrite made past the grace is generated from 10-a still.
        write_json(confdir / "10-a.conf", {**MYCNI, "capabilities": {"later": True}})
        want = expected(confdir / "10-a.conf", capabilities={"later": True})
        await eventually(lambda: read(out) == want)


def _apart(confdir: Path) -> tuple[Path, Path, DaemonConfig, dict[str, Any]]:
    """A primary in ``auto`` (``multusAutoconfigDir``) and the output in ``out``
    (``cniConfigDir``), two directories apart."""
    auto, outdir = confdir / "auto", confdir / "out"
    auto.mkdir()
    outdir.mkdir()
    write_json(auto / "10-a.conf", MYCNI)
    config, raw = daemon_config(auto, cniConfigDir=str(outdir))
    return auto, outdir, config, raw


async def test_survives_the_directory_disappearing_and_reappearing(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="multusd.config")
    auto, outdir, config, raw = _apart(confdir)
    out = outdir / "00-multus.conf"
    async with watching(ConfigManager(config, raw, settings=FAST)):
        shutil.rmtree(auto)
        await eventually(lambda: "re-arming the watch" in caplog.text)  # the loss was seen
        assert read(out) == expected(auto / "10-a.conf")
        auto.mkdir()
        write_json(auto / "10-a.conf", {**MYCNI, "capabilities": {"again": True}})
        want = expected(auto / "10-a.conf", capabilities={"again": True})
        await eventually(lambda: read(out) == want)
        # and the re-armed watch sees later changes too
        write_json(auto / "10-a.conf", {**MYCNI, "capabilities": {"later": True}})
        await eventually(
            lambda: read(out) == expected(auto / "10-a.conf", capabilities={"later": True})
        )


async def test_the_output_is_restored_when_the_shared_directory_comes_back(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="multusd.config")
    auto = confdir / "net.d"
    auto.mkdir()
    write_json(auto / "10-a.conf", MYCNI)
    config, raw = daemon_config(auto)
    async with watching(ConfigManager(config, raw, settings=FAST)):
        shutil.rmtree(auto)
        await eventually(lambda: "re-arming the watch" in caplog.text)  # the loss was seen
        auto.mkdir()
        write_json(auto / "10-a.conf", MYCNI)
        await eventually(lambda: read(auto / "00-multus.conf") == expected(auto / "10-a.conf"))


@pytest.mark.parametrize("how", ["daemon-config", "argument"])
async def test_keep_config_on_exit(confdir: Path, how: str) -> None:
    write_json(confdir / "10-a.conf", MYCNI)
    if how == "daemon-config":
        config, raw = daemon_config(confdir, keepConfigOnExit=True)
        manager = ConfigManager(config, raw, settings=FAST)
    else:
        config, raw = daemon_config(confdir)
        manager = ConfigManager(config, raw, settings=FAST, keep_config_on_exit=True)
    assert config.keep_config_on_exit is (how == "daemon-config")
    async with watching(manager):
        pass
    assert read(confdir / "00-multus.conf") == expected(confdir / "10-a.conf")


async def test_write_config_falls_back_to_the_config_found_at_start(confdir: Path) -> None:
    primary = confdir / "10-a.conf"
    write_json(primary, MYCNI)
    config, raw = daemon_config(confdir)
    async with ConfigManager(config, raw, settings=FAST) as manager:
        await manager.wait_for_primary()
        primary.write_bytes(b"")  # mid-write by the primary's installer
        out = await manager.write_config()
        assert out.read_bytes() == expected(primary)


async def test_the_watch_task_cancels_promptly(confdir: Path) -> None:
    write_json(confdir / "10-a.conf", MYCNI)
    config, raw = daemon_config(confdir)
    slow_ticks = ManagerSettings(recheck_interval=30.0, step_ms=10, debounce_ms=50)
    async with ConfigManager(config, raw, settings=slow_ticks) as manager:
        await manager.wait_for_primary()
        await manager.write_config()
        task = asyncio.create_task(manager.watch())

        await until_watched(confdir)  # cancelled while it watches, not before it started
        task.cancel()
        async with asyncio.timeout(2):
            with pytest.raises(asyncio.CancelledError):
                await task


async def test_install_static_config(confdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    source = confdir / "my-multus.conf"
    source.write_text('{"type":"multus-shim"}')
    target_dir = confdir / "net.d"
    config, _ = daemon_config(confdir, multusConfigFile=str(source), cniConfigDir=str(target_dir))
    await install_static_config(config)
    copied = target_dir / "my-multus.conf"
    assert copied.read_text() == '{"type":"multus-shim"}'
    assert copied.stat().st_mode & 0o777 == 0o644

    missing, _ = daemon_config(confdir, multusConfigFile=str(confdir / "nope.conf"))
    with caplog.at_level(logging.ERROR, logger="multusd.config.manager"):
        await install_static_config(missing)  # logged, not raised (as upstream)
    assert "failed to copy the user provided configuration" in caplog.text


async def test_remove_config_removes_even_when_keeping_on_exit(confdir: Path) -> None:
    """The readiness-lost path removes the file whatever keepConfigOnExit says."""
    write_json(confdir / "10-a.conf", MYCNI)
    config, raw = daemon_config(confdir, keepConfigOnExit=True)
    async with watching(ConfigManager(config, raw, settings=FAST)) as task:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        manager_out = confdir / "00-multus.conf"
        assert manager_out.exists()
    manager = ConfigManager(config, raw, settings=FAST)
    await manager.remove_config()
    assert not manager_out.exists()
    await manager.remove_config()  # idempotent


async def test_force_cni_version_applies_to_a_primary_that_takes_over(confdir: Path) -> None:
    write_json(confdir / "20-b.conf", MYCNI)
    config, raw = daemon_config(confdir, forceCNIVersion=True, followPrimaryConfig=True)
    out = confdir / "00-multus.conf"
    async with watching(ConfigManager(config, raw, settings=FAST)):
        replace_json(confdir / "10-a.conf", {**MYCNI, "cniVersion": "0.3.1"})
        await eventually(lambda: read(out) == expected(confdir / "10-a.conf"))
    assert json.loads((confdir / "10-a.conf").read_text())["cniVersion"] == "0.4.0"


async def test_a_directory_made_again_at_once_is_watched_again(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``rm -rf`` and ``mkdir`` of the same path: ext4 gives the new directory the number the
    old one freed, and a watch that compared numbers alone stayed on the removed directory."""
    caplog.set_level(logging.INFO, logger="multusd.config")
    auto = confdir / "net.d"
    auto.mkdir()
    write_json(auto / "10-a.conf", MYCNI)
    config, raw = daemon_config(auto)
    out = auto / "00-multus.conf"
    async with watching(ConfigManager(config, raw, settings=FAST)):
        shutil.rmtree(auto)
        auto.mkdir()
        write_json(auto / "10-a.conf", MYCNI)
        await eventually(lambda: read(out) == expected(auto / "10-a.conf"))
        await until_watched(auto)  # the new directory, not the removed one
        write_json(auto / "10-a.conf", {**MYCNI, "capabilities": {"later": True}})
        want = expected(auto / "10-a.conf", capabilities={"later": True})
        await eventually(lambda: read(out) == want)


async def test_a_conf_dir_apart_that_comes_back_gets_the_file_again(
    confdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``cniConfigDir`` is not ``multusAutoconfigDir``: removed and made again (empty), it gets
    ``00-multus.conf`` back without the primary being touched. Twice: the first time may fall
    before the watch's first tick, which syncs anyway."""
    caplog.set_level(logging.INFO, logger="multusd.config")
    auto, outdir, config, raw = _apart(confdir)
    out = outdir / "00-multus.conf"
    async with watching(ConfigManager(config, raw, settings=FAST)):
        for _ in range(2):
            await until_watched(outdir)
            shutil.rmtree(outdir)
            outdir.mkdir()
            await eventually(lambda: read(out) == expected(auto / "10-a.conf"))
        await eventually(lambda: f"{outdir} was removed or replaced" in caplog.text)
