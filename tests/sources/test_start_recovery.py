"""Facts at the first scrape whatever the start (issue 23, items 1 and 2).

``serve`` started on a log that already holds the server's boot reads from the end, and reads
the current boot back (exporter/sources/recovery.py) so that the first scrape has the facts; the
lines read back are not counted. Checked against ``replay`` of the same files (what the log says,
read whole), in each start mode: no positions, a second boot appended, the boot rotated and
compressed away, positions without their saved facts, lost positions, hostile entries (read from
the start), and the DaemonSet on pods that already run."""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import subprocess

import pytest
import test_serve_support as h

from exporter.catalogues import contract as C

# every family of the log that is not a counter: what a restart keeps and the boot says
FACT_NAMES = {m.name for m in C.LOG_METRICS if m.type != C.COUNTER}
DEMO = h.ROOT / "fixtures" / "demo" / "sglang-mamba-bound.log"
# the fixtures of the two engines, in every format they are written in (not fixtures/other-engines)
ENGINE_FIXTURES = ("demo", "scenarios", "sglang", "vllm", "formats")
VLLM = h.ROOT / "fixtures" / "vllm" / "v0.33.0.log"


def facts(text: str, source: str | None = None) -> list[str]:
    out = []
    for ln in text.splitlines():
        if ln.startswith("#") or not ln:
            continue
        name = re.split(r"[{ ]", ln, maxsplit=1)[0]
        if name in FACT_NAMES and (source is None or f'source="{source}"' in ln):
            out.append(ln)
    return sorted(out)


def replay(*paths) -> str:
    return subprocess.run([str(h.EXE), "replay", *map(str, paths)], check=True, capture_output=True, text=True).stdout


def second_boot(data: bytes) -> bytes:
    """The same log as a second boot with other pools (and a later time), as a restart prints it."""
    text = data.decode()
    text = text.replace("max_mamba_cache_size: 80", "max_mamba_cache_size: 120").replace("#tokens: 211360", "#tokens: 150000")
    text = text.replace("capped to 16", "capped to 24").replace("max_running_requests=16", "max_running_requests=24")
    return text.replace("2026-08-14 ", "2026-08-15 ").encode()


def test_every_fixture_first_scrape_equals_replay(serve, tmp_path):
    """Every fixture of both engines (every release, every format), served without flags as a log
    that was already written: the first scrape holds exactly the facts replay reports, and no line
    counted."""
    d = tmp_path / "logs"
    d.mkdir()
    for sub in ENGINE_FIXTURES:
        for f in sorted((h.ROOT / "fixtures" / sub).glob("*.log")):
            shutil.copy(f, d / f"{sub}-{f.name}")
    files = sorted(d.glob("*.log"))
    replayed = replay(*files)
    srv = serve("--log", str(d / "*.log"))
    first = srv.metrics()
    # a log of several boots: what replay computes over all of them (the recommended ratio, from
    # the usage of every boot) is, read back, computed over the current boot; the rest is equal
    several = {f.stem for f in files if h.value(replayed, "hybrid_cache_server_restarts_total", source=f.stem) > 0}
    assert {"scenarios-sglang-two-boots", "scenarios-vllm-two-boots"} <= several

    def comparable(lines: list[str]) -> list[str]:
        return [ln for ln in lines if not (ln.startswith("hybrid_cache_recommended_") and any(f'source="{s}"' in ln for s in several))]

    want = comparable(facts(replayed))
    assert comparable(facts(first)) == want
    assert len(want) > 10 * len(files)  # the comparison compares something
    assert h.value(first, h.LINES) == 0  # read back, not counted
    for f in files:  # every line from the (last) boot on; some fixtures have lines before theirs
        recovered = h.value(first, "hybrid_cache_exporter_recovered_lines", source=f.stem)
        total = h.value(replayed, h.LINES, source=f.stem)
        assert 0 < recovered <= total, f
        assert f.stem in several or recovered > 0.5 * total, f


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_second_boot_appended(serve, tmp_path, engine):
    """Two boots in one file: the first scrape has the second boot's facts (replay's), not the first's."""
    log = tmp_path / "server.log"
    if engine == "sglang":
        data = DEMO.read_bytes()
        log.write_bytes(data + second_boot(data))
    else:
        data = VLLM.read_bytes()
        other = data.replace(b"GPU KV cache size: ", b"GPU KV cache size: 1").replace(
            b"Maximum concurrency for", b"Maximum concurrency  for"
        )
        log.write_bytes(data + other)
    want = facts(replay(log))
    first_boot = facts(replay(_copy(tmp_path, data)))
    assert want != first_boot
    srv = serve("--log", str(log))
    assert facts(srv.metrics()) == want


def _copy(tmp_path, data: bytes):
    d = tmp_path / "first"
    d.mkdir(exist_ok=True)
    (d / "server.log").write_bytes(data)
    return d / "server.log"


def renamed(lines: list[str], source: str) -> list[str]:
    """replay's facts of a fixture as the source ``source`` serve names it."""
    return sorted(re.sub(r'source="[^"]*"', f'source="{source}"', ln) for ln in lines)


BOOT = (
    "hybrid_cache_mamba_capacity",
    "hybrid_cache_kv_capacity",
    "hybrid_cache_max_running",
    "hybrid_cache_server_info",
    "hybrid_cache_mamba_slots",
)


def boot_facts(lines: list[str]) -> list[str]:
    """What the boot section says (capacity, caps, server_info), and the mamba_capped verdict."""
    return [ln for ln in lines if ln.startswith(BOOT) or ('rule="mamba_capped"' in ln and ln.startswith("hybrid_cache_finding{"))]


def test_boot_rotated_and_compressed_away(serve, tmp_path):
    """The boot is in server.log.1.gz, the current file holds only later lines: it is found there."""
    data = DEMO.read_bytes()
    cut = data.index(b"\n", len(data) // 2) + 1
    log = tmp_path / "server.log"
    with gzip.open(str(log) + ".1.gz", "wb") as g:
        g.write(data[:cut])
    log.write_bytes(data[cut:])
    srv = serve("--log", str(log))
    first = srv.metrics()
    assert facts(first) == renamed(facts(replay(DEMO)), "server")
    assert h.value(first, h.LINES) == 0
    assert "server.log.1.gz@0" in srv.stderr()


def test_positions_without_their_facts(serve, tmp_path):
    """A valid position whose saved facts are damaged: resumed at the offset, the facts read back
    from before it, the lines written while down counted."""
    log, pos = tmp_path / "server.log", tmp_path / "pos.json"
    log.write_bytes(DEMO.read_bytes())
    args = ("--log", str(log), "--positions", str(pos), "--positions-interval", "0.1")
    srv = serve(*args, "--from-beginning")
    h.wait_for(lambda: pos.exists() and json.loads(pos.read_text())["files"][str(log)][-1]["offset"] == log.stat().st_size)
    assert srv.stop() == 0
    doc = json.loads(pos.read_text())
    doc["state"] = {"server": {"engine": "sglang", "year": "twenty", "servers": {}}}  # damaged: dropped, counted
    pos.write_text(json.dumps(doc))
    h.fsync_append(log, h.lines_blob(0, 5))
    srv2 = serve(*args)
    first = srv2.metrics()
    assert boot_facts(facts(first)) == boot_facts(renamed(facts(replay(DEMO)), "server"))
    assert h.value(first, "hybrid_cache_exporter_positions_corrupt_total") == 1
    h.wait_count(srv2, 5)  # the lines written while down, counted once


def test_lost_positions_file(serve, tmp_path):
    """--positions whose file is gone (a new volume): like a first start, from the end, facts read back."""
    log, pos = tmp_path / "server.log", tmp_path / "pos.json"
    log.write_bytes(DEMO.read_bytes())
    srv = serve("--log", str(log), "--positions", str(pos))
    first = srv.metrics()
    assert facts(first) == renamed(facts(replay(DEMO)), "server")
    assert h.value(first, h.LINES) == 0


@pytest.mark.parametrize("hostile", ["offset-10-30", "fp-len-2-62"])
def test_hostile_entry_reads_the_file(serve, tmp_path, hostile):
    """Item 2: an absurd offset or fingerprint length is rejected and counted, and the file is then
    read from its start: its 100 lines are counted and its facts are in the first scrape; the other
    file's valid entry still resumes."""
    log, other, pos = tmp_path / "server.log", tmp_path / "other.log", tmp_path / "pos.json"
    boot = DEMO.read_bytes()
    log.write_bytes(boot + h.lines_blob(0, 100))
    other.write_bytes(h.lines_blob(0, 30))
    st, ost = log.stat(), other.stat()
    bad = {"dev": st.st_dev, "ino": st.st_ino, "fp": "0" * 40, "fp_len": 256, "offset": 10}
    bad |= {"offset": 10**30} if hostile == "offset-10-30" else {"fp_len": 2**62}
    good = {"dev": ost.st_dev, "ino": ost.st_ino, "fp": hashlib.sha1(other.read_bytes()[:256]).hexdigest(), "fp_len": 256}
    good["offset"] = len(h.lines_blob(0, 20))
    pos.write_text(json.dumps({"version": 1, "files": {str(log): [bad], str(other): [good]}}))
    srv = serve("--log", str(log), "--log", str(other), "--positions", str(pos))
    first = srv.metrics()
    lines = log.read_bytes().count(b"\n")
    assert h.value(first, h.LINES, source="server") == lines  # every line of the file
    assert h.value(first, h.DECODE, source="server") >= 100
    assert boot_facts(facts(first, "server")) == boot_facts(renamed(facts(replay(DEMO)), "server"))
    assert h.value(first, "hybrid_cache_exporter_positions_corrupt_total") == 1
    h.wait_count(srv, 10, source="other")  # the valid entry resumed: 10 lines after its offset


def test_daemonset_on_pods_that_already_run(serve, tmp_path):
    """--kubernetes-pods started on a node whose pod has booted and run: the first scrape has the
    pod's facts (read back from its CRI log), nothing counted."""
    root = tmp_path / "pods"
    d = root / "infer_qwen-0_0d5c7e2a-1111-4a4a-9c9c-000000000001" / "sglang"
    d.mkdir(parents=True)
    cri = "".join(f"2026-08-14T08:17:30.{i:06d}Z stderr F {ln}\n" for i, ln in enumerate(DEMO.read_text().splitlines()))
    (d / "0.log").write_text(cri)
    srv = serve("--kubernetes-pods", str(root))
    first = srv.metrics()
    src = "infer/qwen-0/sglang"
    got = [ln for ln in facts(first, src) if ln.startswith("hybrid_cache_mamba_capacity_slots")]
    assert got and got[0].endswith(" 80.0"), facts(first)
    assert any(ln.startswith("hybrid_cache_finding{") and 'rule="mamba_capped"' in ln and ln.endswith(" 1.0") for ln in facts(first, src))
    assert h.value(first, h.LINES) == 0


def test_second_boot_while_down_with_positions(serve, tmp_path):
    """--positions: the server restarted (a second boot appended) while the exporter was down; the
    first scrape after its restart has the second boot's facts, read from the saved offset on."""
    log, pos = tmp_path / "server.log", tmp_path / "pos.json"
    data = DEMO.read_bytes()
    log.write_bytes(data)
    args = ("--log", str(log), "--positions", str(pos), "--positions-interval", "0.1")
    srv = serve(*args, "--from-beginning")
    h.wait_for(lambda: pos.exists() and json.loads(pos.read_text())["files"][str(log)][-1]["offset"] == len(data))
    assert srv.stop() == 0
    h.fsync_append(log, second_boot(data))
    srv2 = serve(*args)
    first = srv2.metrics()
    assert boot_facts(facts(first)) == boot_facts(renamed(facts(replay(log)), "server"))
    assert any(ln.startswith("hybrid_cache_mamba_capacity_slots") and ln.endswith(" 120.0") for ln in facts(first))


def test_boot_in_a_copy_rotated_just_before_the_start(serve, tmp_path):
    """The current file is empty (rotated just before the exporter started): the boot is read
    back from server.log.1."""
    log = tmp_path / "server.log"
    (tmp_path / "server.log.1").write_bytes(DEMO.read_bytes())
    log.touch()
    srv = serve("--log", str(log))
    assert facts(srv.metrics()) == renamed(facts(replay(DEMO)), "server")


def test_unparseable_positions_file_reads_every_file(serve, tmp_path):
    """A positions file that cannot be parsed at all (200,000-deep nesting): counted once, and
    every file read from its start, facts and lines (not from their ends)."""
    log, pos = tmp_path / "server.log", tmp_path / "pos.json"
    log.write_bytes(DEMO.read_bytes() + h.lines_blob(0, 100))
    pos.write_text('{"version": 1, "files": ' + "[" * 200_000 + "]" * 200_000 + "}")
    srv = serve("--log", str(log), "--positions", str(pos))
    first = srv.metrics()
    assert h.value(first, h.LINES) == log.read_bytes().count(b"\n")
    assert boot_facts(facts(first)) == boot_facts(renamed(facts(replay(DEMO)), "server"))
    assert h.value(first, "hybrid_cache_exporter_positions_corrupt_total") == 1
