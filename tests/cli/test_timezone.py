"""The zone a log's zone-less times are read in (docs/formats/README.md#time): the exporter's local
zone by default, the one ``--log.timezone`` names otherwise, on every command; times that carry
their zone are exact whatever the setting. Run as a user runs it: the console command, with the
process's ``TZ`` set to zones other than UTC (the suite pins UTC in tests/conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
ZONES = ("CET-1", "America/New_York", "Asia/Kolkata")  # a POSIX TZ string (fixed +1), DST, a half hour


def offset(tz: str, utc_ts: float) -> float:
    """The UTC offset of ``tz`` at the wall time ``utc_ts`` shows in UTC."""
    if tz == "CET-1":
        return 3600.0
    from datetime import datetime
    from zoneinfo import ZoneInfo

    return ZoneInfo(tz).utcoffset(datetime.utcfromtimestamp(utc_ts)).total_seconds()


LAST = re.compile(rb"hybrid_cache_last_line_timestamp_seconds\{[^}]*\} (\S+)")
TIMES = re.compile(rb"(_timestamp_seconds\{[^}]*\}) \S+")  # every log-time value of an exposition


def replay(*args: str, tz: str = "UTC", cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, TZ=tz)
    return subprocess.run([sys.executable, "-m", "exporter", "replay", *args], cwd=cwd, env=env, capture_output=True, timeout=120)


def last_ts(out: bytes) -> float:
    return float(LAST.search(out).group(1))


@pytest.mark.parametrize("tz", ZONES)
@pytest.mark.parametrize("fixture", ["sglang/v0.5.23.log", "vllm/v0.33.0.log"])
def test_the_flag_gives_the_golden_in_any_process_zone(tz: str, fixture: str) -> None:
    golden = (GOLDEN / fixture.replace("/", "__").replace(".log", ".prom")).read_bytes()
    r = replay("--log.timezone", "UTC", "fixtures/" + fixture, tz=tz)
    assert r.returncode == 0, r.stderr
    assert r.stdout == golden
    # without the flag the process's zone is the log's: the same wall times, another instant
    r = replay("fixtures/" + fixture, tz=tz)
    assert last_ts(r.stdout) == last_ts(golden) - offset(tz, last_ts(golden))


@pytest.mark.parametrize("zone", ["Asia/Kolkata", "+05:30", "+0530"])
def test_a_named_zone_or_offset_shifts_the_naive_times(zone: str) -> None:
    golden = (GOLDEN / "sglang__v0.5.23.prom").read_bytes()
    r = replay("--log.timezone", zone, "fixtures/sglang/v0.5.23.log")
    assert r.returncode == 0, r.stderr
    assert last_ts(r.stdout) == last_ts(golden) - 19800
    assert TIMES.sub(rb"\1", r.stdout) == TIMES.sub(rb"\1", golden)  # nothing but the times moved


def test_times_with_a_zone_are_exact_whatever_the_setting(tmp_path: Path) -> None:
    line = (
        '{"timestamp": "2026-08-14T08:17:30.500+02:00", "level": "info", "event": "Decode batch, #running-req: 4, #full token: 1051, '
        'full token usage: 0.20, mamba num: 16, mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"}\n'
    )
    log = tmp_path / "z.log"
    log.write_text(line)
    got = {
        last_ts(replay("--log.timezone", zone, str(log), tz=tz).stdout)
        for zone, tz in (("UTC", "UTC"), ("Asia/Kolkata", "CET-1"), ("local", "America/New_York"))
    }
    assert got == {1786688250.5}  # 2026-08-14T06:17:30.5Z


def test_report_and_serve_have_the_flag_and_a_bad_zone_is_refused() -> None:
    for cmd in ("replay", "report", "serve"):
        h = subprocess.run([sys.executable, "-m", "exporter", cmd, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert "--log.timezone" in h.stdout, cmd
    r = replay("--log.timezone", "Mars/Olympus", "fixtures/sglang/v0.5.23.log")
    assert r.returncode == 2 and b"unknown time zone 'Mars/Olympus'" in r.stderr


def test_a_time_of_day_is_dated_in_the_same_zone() -> None:
    """A header that kept only its time of day takes the date of the last dated line, in the zone
    the dated line was read in (not the process's)."""
    from exporter.app import new_pipeline
    from parsers import clock

    try:
        clock.set_zone("Asia/Kolkata")
        pipe = new_pipeline("sglang")
        pipe.feed("s", "[2026-08-23 23:59:50 TP0] KV Cache is allocated. #tokens: 211360, K size: 3.22 GB, V size: 3.22 GB")
        pipe.feed("s", "[00:00:03 TP0] KV Cache is allocated. #tokens: 211360, K size: 3.22 GB, V size: 3.22 GB")
        assert pipe.sources["s"].last_ts == clock.wall_epoch(2026, 8, 24, 0, 0, 3)
        assert clock.wall_epoch(2026, 8, 24, 0, 0, 3) == 1787529603 - 19800  # 2026-08-24T00:00:03+05:30
    finally:
        clock.set_zone("local")
