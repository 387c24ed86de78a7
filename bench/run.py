#!/usr/bin/env python3
"""hybrid-cache-exporter vs mtail benchmark (entry point of ``make bench`` / ``make bench-smoke``).

    python bench/run.py            # full run (~15-25 min on 2 cores)
    python bench/run.py --quick    # CI smoke: small files, 3 s idle window, no 10M-line soak

Sections, all in one run, results in ``bench/out/`` (results.md, results.json, raw outputs):

1. throughput: ``grep -c`` (floor), ``mtail --one_shot`` and ``hybrid-cache-exporter replay`` on
   the same generated SGLang log (2M lines); each measured ``--reps`` times (median); lines/s,
   MB/s, CPU seconds, peak RSS (``wait4`` rusage of each child), ratio to mtail.
2. correctness: decode/prefill batch counts and prefill new/cached token totals must be
   IDENTICAL in mtail's output, the exporter's exposition and the generator's truth file.
   Any difference exits 1.
   Then ``bench/stages.py`` on the same file and code: CPU seconds of replay's stages (scan,
   parse, apply, rules) and the cost per sample the rules see.
3. scaling: exporter replay of 1M vs 4M lines, and of 10 files (``replay f1 ... f10``) vs 1 file.
4. live: ``serve`` and the mtail daemon tail the same file; decode lines are appended at a steady
   rate and both ``/metrics`` are polled: write->visible latency p50/p99. Then idle CPU of both
   daemons over ``--idle`` seconds (``/proc/PID/stat`` utime+stime) and their RSS.
5. soak: ``serve`` RSS after 10M lines and 100 rename rotations (counts checked after each).
6. ``--profile``: cProfile (and py-spy, when installed) of ``replay`` on the 2M log.

Exit codes: 0 ok (also when mtail is not installed: prints a SKIP line), 1 a count differs or
lines were lost, 2 the benchmark could not run (exporter missing, daemon did not start, ...).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

import formats  # noqa: E402
import gen  # noqa: E402

MTAIL_PROG = BENCH / "sglang.mtail"
CLK_TCK = os.sysconf("SC_CLK_TCK")

COUNTERS = (
    ("decode batches", "hybrid_cache_decode_batches_total", {}, "decode_batches"),
    ("prefill batches", "hybrid_cache_prefill_batches_total", {}, "prefill_batches"),
    ("prefill tokens (new)", "hybrid_cache_prefill_tokens_total", {"kind": "new"}, "prefill_new_tokens"),
    ("prefill tokens (cached)", "hybrid_cache_prefill_tokens_total", {"kind": "cached"}, "prefill_cached_tokens"),
)
GAUGES = (
    ("running requests", "hybrid_cache_running_requests", "running"),
    ("queued requests", "hybrid_cache_queued_requests", "queued"),
    ("kv usage", "hybrid_cache_kv_usage_ratio", "kv_usage"),
    ("mamba usage", "hybrid_cache_mamba_usage_ratio", "mamba_usage"),
    ("mamba used slots", "hybrid_cache_mamba_used_slots", "mamba_used_slots"),
    ("gen throughput", "hybrid_cache_generation_throughput_tokens_per_second", "gen_throughput"),
)


@dataclass
class Profile:
    name: str
    lines: int  # main throughput file
    grow_small: int
    grow_large: int
    multi_files: int
    multi_lines: int  # per file
    reps: int
    live_lines: int
    live_rate: float  # lines/s
    idle: float
    soak_lines: int
    soak_rotations: int
    vllm_lines: int
    rate: float = 10.0  # main file: SGLang lines per second of log time (a busy server: ~10; 5 before 2026-12)
    formats_lines: int = 0  # the log rewritten in each format (bench/formats.py); 0: the main file itself
    burst_rate: float = 100.0  # the burst log: the main file's size at this many lines per second of log time


FULL = Profile("full", 2_000_000, 1_000_000, 4_000_000, 10, 100_000, 3, 300, 10.0, 60.0, 10_000_000, 100, 200_000)
QUICK = Profile("quick", 30_000, 10_000, 40_000, 10, 3_000, 3, 30, 20.0, 3.0, 50_000, 5, 10_000)


class BenchError(Exception):
    """The benchmark could not run (exit 2)."""


# ----------------------------------------------------------------------------- helpers


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def venv_python() -> Path:
    py = ROOT / ".venv" / "bin" / "python"
    return py if py.exists() else Path(sys.executable)


def python_cmd(exp: list[str]) -> list[str]:
    """The interpreter, with its flags and environment, that runs the benchmarked exporter ``exp``:
    the frozen copy's ``env PYTHONPATH=... python -S -P`` for --snapshot/--at (its code, not the
    work tree's), else the venv's Python."""
    return exp[:-2] if exp[-2:] == ["-m", "exporter"] else [str(venv_python())]


def scanner_of(exp: list[str]) -> str:
    """Which bulk scanner the benchmarked exporter runs: the C extension or the pure-Python one."""
    code = "import exporter.state.scan as s; print('C extension' if s.native else 'pure Python')"
    cmd = [*python_cmd(exp), "-c", code]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    return r.stdout.strip() or "unknown"


def exporter_cmd(explicit: str | None) -> list[str]:
    if explicit:
        return explicit.split()
    exe = ROOT / ".venv" / "bin" / "hybrid-cache-exporter"
    if exe.exists():
        return [str(exe)]
    on_path = shutil.which("hybrid-cache-exporter")
    if on_path:
        return [on_path]
    if (ROOT / "exporter" / "__main__.py").exists():
        return [str(venv_python()), "-m", "exporter"]
    raise BenchError("hybrid-cache-exporter not found (install with .venv/bin/pip install -e .)")


def ensure_log(
    engine: str, lines: int, seed: int, data: Path, tag: str = "", start: str | None = None, rate: float = 5.0
) -> tuple[Path, dict]:
    """Generate (or reuse) a log and its truth sidecar under ``data``."""
    data.mkdir(parents=True, exist_ok=True)
    if rate != 5.0:
        tag += f"-r{rate:g}"
    path = data / f"{engine}-{lines}-s{seed}{tag}.log"
    tpath = Path(str(path) + ".truth.json")
    if path.exists() and tpath.exists():
        truth = json.loads(tpath.read_text())
        if truth.get("lines") == lines:
            return path, truth
    t0 = time.perf_counter()
    truth = gen.generate(engine, lines, seed, str(path), start, rate=rate)
    tdict = truth.__dict__.copy()
    tpath.write_text(json.dumps(tdict, indent=1))
    log(f"generated {path.name} ({path.stat().st_size / 1e6:.0f} MB) in {time.perf_counter() - t0:.1f}s")
    return path, tdict


@dataclass
class Run:
    wall: float
    user: float
    sys: float
    maxrss_kb: int
    rc: int
    stdout: Path


TIME = "/usr/bin/time" if os.path.exists("/usr/bin/time") else None


def run_measured(cmd: list[str], stdout: Path, stderr: Path, cwd: Path = ROOT) -> Run:
    """Run a child to completion: wall time, CPU time and peak RSS of that child alone.

    Peak RSS comes from ``/usr/bin/time`` when present: ``ru_maxrss`` of a child forked
    directly from this (30 MB) Python process would include the parent's pages from before exec.
    """
    tfile = Path(str(stderr) + ".time")
    full = [TIME, "-f", "%M %U %S", "-o", str(tfile), *cmd] if TIME else cmd
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=cwd)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    maxrss, user, sys_ = ru.ru_maxrss, ru.ru_utime, ru.ru_stime
    if TIME:
        with contextlib.suppress(OSError, ValueError, IndexError):
            last = tfile.read_text().strip().splitlines()[-1].split()
            maxrss, user, sys_ = int(last[0]), float(last[1]), float(last[2])
    return Run(wall, user, sys_, maxrss, rc, stdout)


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prom(text: str) -> list[tuple[str, dict, float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(3) or ""))
        try:
            out.append((m.group(1), labels, float(m.group(4))))
        except ValueError:
            continue
    return out


def sum_metric(samples, name: str, **want) -> float | None:
    vals = [v for n, lab, v in samples if n == name and all(lab.get(k) == w for k, w in want.items())]
    return sum(vals) if vals else None


def last_metric(samples, name: str) -> float | None:
    vals = [v for n, _, v in samples if n == name]
    return vals[-1] if len(vals) == 1 else (None if not vals else float("nan"))


def scrape(port: int, timeout: float = 2.0) -> list[tuple[str, dict, float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
        return parse_prom(r.read().decode("utf-8", "replace"))


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15)


def proc_rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB."""
    rss = hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.0f} k"


def mb(kb: float) -> str:
    return f"{kb / 1024:.0f} MiB"


PACKAGES = ("exporter", "parsers", "dashboards")


def byte_compile(tree: Path) -> str:
    """Byte-compile the exporter's packages under ``tree`` the way ``pip install`` of the wheel does.

    pip compiles every installed ``.py`` with ``compileall.compile_file(path, force=True,
    quiet=True)``: the installing interpreter's optimisation level (0: plain ``.pyc``, docstrings
    and asserts kept) and timestamp invalidation. ``python -m compileall -f -q`` is that call per
    file. Without it an editable tree run under ``PYTHONDONTWRITEBYTECODE=1`` (set in this
    environment and often in CI) compiles ~45 modules from source on every start (~85 ms a run),
    which no installed exporter pays. The ``.pyc`` files go to the packages' own ``__pycache__``
    (gitignored, where Python itself caches them): a separate ``PYTHONPYCACHEPREFIX`` would
    redirect the bytecode of every module, the standard library's too, and make start-up slower.
    Returns the line the results header shows.
    """
    dirs = [str(tree / pkg) for pkg in PACKAGES if (tree / pkg).is_dir()]
    r = subprocess.run([str(venv_python()), "-m", "compileall", "-f", "-q", *dirs], capture_output=True, text=True)
    if r.returncode != 0:
        raise BenchError(f"compileall failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return "byte-compiled as pip installs it (compileall, optimisation level 0)"


def not_compiled() -> str:
    """The results header's bytecode line for a run that does not compile (``--no-compile``, ``--exporter``)."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return "as found: PYTHONDONTWRITEBYTECODE is set, so modules without a .pyc compile from source on every run"
    return "as found (bytecode as Python caches it)"


def snapshot(out: Path, rev: str | None) -> Path:
    """Freeze the exporter's code so edits made while a long run is going do not leak into it.

    ``rev`` = a commit (``git archive``); None = a copy of the work tree's packages. Returns the
    directory of the copy (:func:`snapshot_cmd` runs it).
    """
    if rev:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", rev], capture_output=True, text=True, check=True
        ).stdout.strip()
        snap = out / f"src-{rev}"
        if not snap.exists():
            snap.mkdir(parents=True)
            arch = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(snap)], input=arch, check=True)
            if (snap / "setup.py").exists():
                build_scanner(snap)
    else:
        snap = out / "src-worktree"
        shutil.rmtree(snap, ignore_errors=True)
        for pkg in PACKAGES:
            if (ROOT / pkg).is_dir():
                shutil.copytree(ROOT / pkg, snap / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return snap


def build_scanner(snap: Path) -> None:
    """Build the C scanner of a ``git archive`` copy as ``pip install`` does: a wheel built in pip's
    isolated environment (the venv's own setuptools may be too old for pyproject.toml, and a
    failed ``setup.py build_ext`` used to leave the copy on the pure-Python scanner unnoticed),
    whose ``exporter/_scan*.so`` goes into the copy. Without a compiler the results header says
    which scanner ran (:func:`scanner_of`)."""
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([str(venv_python()), "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp, str(snap)], capture_output=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if r.returncode != 0 or not wheels:
            log(f"warning: the C scanner of {snap.name} did not build; it runs the pure-Python scanner")
            return
        with zipfile.ZipFile(wheels[0]) as z:
            for name in z.namelist():
                if name.startswith("exporter/_scan") and name.endswith(".so"):
                    (snap / name).write_bytes(z.read(name))


def snapshot_cmd(snap: Path) -> list[str]:
    """The command that runs the frozen copy ``snap``: ``python -S`` with site-packages on
    PYTHONPATH skips the ``.pth`` files, so the editable install cannot map ``exporter``/``parsers``
    back to the work tree."""
    py = venv_python()
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    # -S: no site (.pth) processing; -P: no cwd/script dir on sys.path (the harness runs from the repo root)
    return ["env", f"PYTHONPATH={snap.resolve()}:{site}", str(py), "-S", "-P", "-m", "exporter"]


# ----------------------------------------------------------------------------- throughput


@dataclass
class Tool:
    name: str
    cmd: list[str]
    runs: list[Run] = field(default_factory=list)

    def median(self) -> Run:
        walls = sorted(self.runs, key=lambda r: r.wall)
        return walls[len(walls) // 2]


def mtail_cmd(mtail: str, path: Path) -> list[str]:
    """``mtail --one_shot`` of the benchmark's program over ``path`` (its own listener on a free port)."""
    return [
        mtail,
        "--one_shot",
        "--one_shot_format",
        "prometheus",
        "--progs",
        str(MTAIL_PROG),
        "--logs",
        str(path),
        "--port",
        "0",
        "--address",
        "127.0.0.1",
        "--logtostderr",
    ]


def throughput(lines: int, tools: list[Tool], reps: int, out: Path) -> None:
    """Interleaved reps (grep, mtail, exporter, grep, ...) so drift hits all tools alike."""
    for rep in range(reps):
        for t in tools:
            slug = re.sub(r"\W+", "_", t.name)
            r = run_measured(t.cmd, out / f"{slug}.{rep}.out", out / f"{slug}.{rep}.err")
            if r.rc not in (0, 1) or (r.rc == 1 and not t.name.startswith("grep")):
                err = (out / f"{slug}.{rep}.err").read_text(errors="replace")[-2000:]
                raise BenchError(f"{t.name} exited {r.rc}: {' '.join(t.cmd)}\n{err}")
            t.runs.append(r)
            log(f"  {t.name:<28} rep {rep + 1}: {r.wall:7.2f}s  {fmt_rate(lines / r.wall)} lines/s  rss {mb(r.maxrss_kb)}")


def startup(exp: list[str], data: Path, reps: int, out: Path) -> dict:
    """Start-up of the benchmarked command: ``--version`` and ``replay`` of a 100-line log (its
    start-up block and a few batch lines), interleaved, at least 5 runs each. ``replay``'s share of
    a throughput row is this fixed cost plus the per-line work."""
    path, _ = ensure_log("sglang", 100, 1, data)
    tools = [Tool("start-up --version", [*exp, "--version"]), Tool("start-up replay", [*exp, "replay", str(path)])]
    for rep in range(max(5, reps)):
        for t in tools:
            slug = re.sub(r"\W+", "_", t.name)
            r = run_measured(t.cmd, out / f"{slug}.{rep}.out", out / f"{slug}.{rep}.err")
            if r.rc != 0:
                raise BenchError(f"{t.name} exited {r.rc}: {' '.join(t.cmd)}")
            t.runs.append(r)
    v, rp = tools
    log(f"start-up: --version {v.median().wall * 1000:.0f} ms, replay of 100 lines {rp.median().wall * 1000:.0f} ms (median)")
    return {
        "reps": len(v.runs),
        "lines": 100,
        "version_s": v.median().wall,
        "version_min_s": min(r.wall for r in v.runs),
        "replay_s": rp.median().wall,
        "replay_min_s": min(r.wall for r in rp.runs),
    }


def verify(mtail_out: Path | None, exp_out: Path, truth: dict) -> tuple[list[dict], list[str], list[str]]:
    """Compare counters (fatal) and last gauge values (warnings) across mtail, exporter, truth."""
    exp = parse_prom(exp_out.read_text(errors="replace"))
    mt = parse_prom(mtail_out.read_text(errors="replace")) if mtail_out else []
    rows, errors, warnings = [], [], []
    for label, name, want, tkey in COUNTERS:
        e = sum_metric(exp, name, **want)
        m = sum_metric(mt, name, **want) if mtail_out else None
        t = truth.get(tkey)
        ok = e is not None and e == t and (mtail_out is None or m == e)
        rows.append({"what": label, "metric": name, "truth": t, "mtail": m, "exporter": e, "ok": ok})
        if not ok:
            errors.append(f"{label}: truth={t} mtail={m} exporter={e}")
    for label, name, tkey in GAUGES:
        e = last_metric(exp, name)
        m = last_metric(mt, name) if mtail_out else None
        t = truth.get("last", {}).get(tkey)
        ok = e is not None and t is not None and abs(e - t) < 1e-9 and (mtail_out is None or m == e)
        rows.append({"what": label + " (last)", "metric": name, "truth": t, "mtail": m, "exporter": e, "ok": ok})
        if not ok and t is not None:
            warnings.append(f"gauge {label}: truth={t} mtail={m} exporter={e}")
    return rows, errors, warnings


# ----------------------------------------------------------------------------- daemons


class Daemon:
    def __init__(self, name: str, cmd: list[str], port: int, out: Path):
        self.name, self.cmd, self.port = name, cmd, port
        slug = re.sub(r"\W+", "_", name)
        self.errf = open(out / f"{slug}.daemon.log", "wb")  # noqa: SIM115
        self.p = subprocess.Popen(
            cmd, stdout=self.errf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True
        )

    def wait_ready(self, timeout: float = 30.0) -> list:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.p.poll() is not None:
                raise BenchError(f"{self.name} exited {self.p.returncode}: {' '.join(self.cmd)} (see {self.errf.name})")
            try:
                return scrape(self.port, timeout=1.0)
            except Exception as e:  # noqa: BLE001 - any failure means not ready yet
                last = e
                time.sleep(0.1)
        raise BenchError(f"{self.name} not ready on port {self.port} after {timeout:.0f}s: {last}")

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(5)
        self.errf.close()


def decode_count(samples) -> float:
    return sum_metric(samples, "hybrid_cache_decode_batches_total") or 0.0


def live_line(i: int) -> str:
    """A decode line whose #running-req is an embedded marker (1..50)."""
    ts = time.strftime("%Y-%m-%d %H:%M:%S")
    run = i % 50 + 1
    full = run * 700
    mamba = run * 3
    return (
        f"[{ts} TP0] Decode batch, #running-req: {run}, #full token: {full}, "
        f"full token usage: {full / gen.SGL_FULL_TOKENS:.2f}, mamba num: {mamba}, "
        f"mamba usage: {mamba / gen.SGL_MAMBA_SLOTS:.2f}, cuda graph: True, "
        f"gen throughput (token/s): {run * 41.5:.2f}, #queue-req: 0\n"
    )


def live(exp_cmd: list[str], mtail: str | None, prof: Profile, out: Path) -> dict:
    """Write->visible latency of both daemons, then idle CPU and RSS."""
    path = out / "live.log"
    path.write_text("\n".join(gen.sglang_startup(time.strftime("%Y-%m-%d %H:%M:%S"))) + "\n")
    daemons: dict[str, Daemon] = {}
    try:
        p1 = free_port()
        daemons["exporter serve"] = Daemon(
            "exporter serve", [*exp_cmd, "serve", "--log", str(path), "--listen", f"127.0.0.1:{p1}"], p1, out
        )
        if mtail:
            p2 = free_port()
            daemons["mtail"] = Daemon(
                "mtail",
                [mtail, "--progs", str(MTAIL_PROG), "--logs", str(path), "--port", str(p2), "--address", "127.0.0.1", "--logtostderr"],
                p2,
                out,
            )
        base = {}
        for d in daemons.values():
            d.wait_ready()
        time.sleep(1.0)  # let both pick up the startup block
        for name, d in daemons.items():
            base[name] = decode_count(scrape(d.port))
        log(f"live: daemons up { ({n: d.p.pid for n, d in daemons.items()}) }, base decode counts {base}")

        n = prof.live_lines
        written = [0.0] * n
        seen: dict[str, list[float | None]] = {name: [None] * n for name in daemons}
        done = threading.Event()
        nwritten = [0]

        def poller(name: str, d: Daemon) -> None:
            while not done.is_set():
                try:
                    c = int(decode_count(scrape(d.port)) - base[name])
                except Exception:  # noqa: BLE001
                    time.sleep(0.01)
                    continue
                now = time.perf_counter()
                lst = seen[name]
                for k in range(min(c, nwritten[0], n)):
                    if lst[k] is None:
                        lst[k] = now - written[k]
                if c >= n:
                    return
                time.sleep(0.01)

        threads = [threading.Thread(target=poller, args=(nm, d), daemon=True) for nm, d in daemons.items()]
        for t in threads:
            t.start()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        period = 1.0 / prof.live_rate
        t_next = time.perf_counter()
        try:
            for i in range(n):
                t_next += period
                delay = t_next - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                data = live_line(i).encode()
                written[i] = time.perf_counter()
                os.write(fd, data)
                nwritten[0] = i + 1
        finally:
            os.close(fd)
        deadline = time.monotonic() + 15
        for t in threads:
            t.join(max(0.1, deadline - time.monotonic()))
        done.set()
        res: dict = {"lines": n, "rate_per_s": prof.live_rate, "poll_interval_ms": 10, "latency": {}, "idle": {}}
        for name, lst in seen.items():
            got = [x for x in lst if x is not None]
            res["latency"][name] = {
                "p50_ms": pct(got, 50) * 1e3,
                "p99_ms": pct(got, 99) * 1e3,
                "max_ms": (max(got) * 1e3) if got else float("nan"),
                "seen": len(got),
                "missed": n - len(got),
            }
            log(
                f"live: {name}: p50 {res['latency'][name]['p50_ms']:.1f} ms  p99 {res['latency'][name]['p99_ms']:.1f} ms  missed {n - len(got)}"
            )

        # idle window: nothing written, nothing scraped
        time.sleep(1.0)
        cpu0 = {nm: proc_cpu_seconds(d.p.pid) for nm, d in daemons.items()}
        t0 = time.perf_counter()
        time.sleep(prof.idle)
        dt = time.perf_counter() - t0
        for nm, d in daemons.items():
            used = proc_cpu_seconds(d.p.pid) - cpu0[nm]
            rss, hwm = proc_rss_kb(d.p.pid)
            res["idle"][nm] = {"seconds": dt, "cpu_seconds": used, "cpu_pct": 100 * used / dt, "rss_kb": rss, "hwm_kb": hwm}
            log(f"idle: {nm}: {100 * used / dt:.2f}% CPU over {dt:.0f}s, RSS {mb(rss)}")
        return res
    finally:
        for d in daemons.values():
            d.stop()


# ----------------------------------------------------------------------------- soak


def soak(exp_cmd: list[str], prof: Profile, out: Path) -> dict:
    """serve on a file that gets ``soak_lines`` lines over ``soak_rotations`` rename rotations."""
    path = out / "soak.log"
    for p in (path, Path(str(path) + ".1")):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    path.touch()
    port = free_port()
    d = Daemon("exporter serve (soak)", [*exp_cmd, "serve", "--log", str(path), "--listen", f"127.0.0.1:{port}"], port, out)
    res: dict = {"lines": prof.soak_lines, "rotations": prof.soak_rotations, "samples": [], "lost": None}
    try:
        d.wait_ready()
        base = decode_count(scrape(port))
        truth = gen.Truth("sglang")
        it = gen.sglang_lines(prof.soak_lines, 4242, truth=truth)
        per = prof.soak_lines // prof.soak_rotations
        t0 = time.perf_counter()
        checkpoints = {1, 2, 5, 10, 25, 50, 75, prof.soak_rotations}
        for k in range(1, prof.soak_rotations + 1):
            count = per if k < prof.soak_rotations else prof.soak_lines - per * (k - 1)
            buf = [next(it) for _ in range(count)]
            buf.append("")
            with open(path, "a", encoding="utf-8") as f:
                f.write("\n".join(buf))
            want = truth.decode_batches
            deadline = time.monotonic() + max(60.0, count / 1000)
            got = None
            while time.monotonic() < deadline:
                got = decode_count(scrape(port)) - base
                if got >= want:
                    break
                time.sleep(0.05)
            if got != want:
                res["lost"] = {"rotation": k, "want": want, "got": got}
                log(f"soak: FAIL after rotation {k - 1}: exporter shows {got} decode batches, truth {want}")
                break
            os.replace(path, Path(str(path) + ".1"))
            path.touch()
            if k in checkpoints:
                rss, hwm = proc_rss_kb(d.p.pid)
                lines_done = per * (k - 1) + count
                res["samples"].append(
                    {"rotations": k, "lines": lines_done, "rss_kb": rss, "hwm_kb": hwm, "elapsed_s": time.perf_counter() - t0}
                )
                log(f"soak: {k} rotations, {lines_done} lines: RSS {mb(rss)} (peak {mb(hwm)}), {time.perf_counter() - t0:.0f}s")
        time.sleep(1.0)
        rss, hwm = proc_rss_kb(d.p.pid)
        res["final_rss_kb"], res["final_hwm_kb"] = rss, hwm
        res["series"] = len(scrape(port))
    finally:
        d.stop()
    return res


# ----------------------------------------------------------------------------- profile


def profile(exp_cmd: list[str], log_path: Path, out: Path, top: int = 25) -> dict:
    """cProfile of ``replay`` (in-process via runpy), plus py-spy's leaf totals when available."""
    res: dict = {}
    prof_file = out / "replay.cprofile"
    code = (
        "import cProfile, pstats, runpy, sys, io\n"
        f"sys.argv = ['hybrid-cache-exporter', 'replay', {str(log_path)!r}]\n"
        "sys.stdout = io.TextIOWrapper(open('/dev/null', 'wb'))\n"
        "pr = cProfile.Profile()\n"
        "try:\n"
        "    pr.runcall(runpy.run_module, 'exporter', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"pr.dump_stats({str(prof_file)!r})\n"
    )
    t0 = time.perf_counter()
    subprocess.run([*python_cmd(exp_cmd), "-c", code], cwd=ROOT, check=True)
    res["cprofile_wall_s"] = time.perf_counter() - t0
    import io
    import pstats

    for key in ("tottime", "cumulative"):
        s = io.StringIO()
        pstats.Stats(str(prof_file), stream=s).strip_dirs().sort_stats(key).print_stats(top)
        (out / f"profile.cprofile.{key}.txt").write_text(s.getvalue())
        res[f"cprofile_{key}"] = s.getvalue()
    spy = shutil.which("py-spy") or str(ROOT / ".venv" / "bin" / "py-spy")
    if Path(spy).exists():
        raw = out / "replay.pyspy.txt"
        r = subprocess.run(
            [
                spy,
                "record",
                "--format",
                "raw",
                "--function",
                "--rate",
                "250",
                "--nonblocking",
                "-o",
                str(raw),
                "--",
                *exp_cmd,
                "replay",
                str(log_path),
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if r.returncode == 0 and raw.exists():
            self_t: dict[str, int] = {}
            incl: dict[str, int] = {}
            total = 0
            for line in raw.read_text().splitlines():
                stack, _, n = line.rpartition(" ")
                if not stack:
                    continue
                cnt = int(n)
                total += cnt
                frames = stack.split(";")
                self_t[frames[-1]] = self_t.get(frames[-1], 0) + cnt
                for fr in set(frames):
                    incl[fr] = incl.get(fr, 0) + cnt
            rows = [f"{'self%':>6} {'incl%':>6}  frame"]
            for fr, c in sorted(self_t.items(), key=lambda kv: -kv[1])[:top]:
                rows.append(f"{100 * c / total:6.1f} {100 * incl[fr] / total:6.1f}  {fr}")
            res["pyspy_top_self"] = "\n".join(rows)
            (out / "profile.pyspy.top.txt").write_text(res["pyspy_top_self"] + "\n")
        else:
            res["pyspy_error"] = r.stderr.decode(errors="replace")[-500:]
    return res


# ----------------------------------------------------------------------------- report


def stages(exp_cmd: list[str], log_path: Path, reps: int) -> dict:
    """bench/stages.py on the main file, run by the interpreter and code of the benchmarked command
    (the frozen copy of --snapshot/--at): CPU seconds of replay's stages and the cost per sample."""
    out = subprocess.run(
        [*python_cmd(exp_cmd), str(BENCH / "stages.py"), str(log_path), "--reps", str(reps), "--json"], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise BenchError(f"bench/stages.py failed: {out.stderr.strip()[-500:]}")
    return json.loads(out.stdout)


def head(columns: list[str], first_left: bool = True, centered: tuple[int, ...] = ()) -> list[str]:
    """A Markdown table's header and alignment rows: the first column left (or right), the
    figures right, the ``centered`` ones centred."""
    align = ["---" if i == 0 and first_left else ":-:" if i in centered else "---:" for i in range(len(columns))]
    return ["| " + " | ".join(columns) + " |", "|" + "|".join(align) + "|"]


def render(results: dict) -> str:
    md: list[str] = []
    env = results["env"]
    md.append(f"## Benchmark results ({results['profile']}, {env['date']})\n")
    md.append(
        f"Machine: {env['cpus']} CPUs, {env['machine']}, Python {env['python']}, {env['mtail']}, exporter at commit {env.get('commit', '?')} (scanner: {env.get('scanner', '?')}). Median of {results['reps']} runs.\n"
    )
    st = env.get("startup")
    md.append(
        f"Exporter code: {env.get('bytecode', '?')}."
        + (
            f" Start-up (median of {st['reps']}, min in brackets): `--version` {st['version_s'] * 1000:.0f} ms"
            f" ({st['version_min_s'] * 1000:.0f}), `replay` of a {st['lines']}-line log {st['replay_s'] * 1000:.0f} ms"
            f" ({st['replay_min_s'] * 1000:.0f}).\n"
            if st
            else "\n"
        )
    )
    tp = results.get("throughput")
    if tp:
        md.append(f"### Throughput: {tp['file']} ({tp['lines']:,} lines, {tp['bytes'] / 1e6:.0f} MB)\n")
        md += head(["tool", "wall s", "lines/s", "MB/s", "CPU s", "lines/CPU-s", "peak RSS", "lines/s vs mtail", "lines/CPU-s vs mtail"])
        for t in tp["tools"]:
            md.append(
                f"| {t['name']} | {t['wall_s']:.2f} | {fmt_rate(t['lines_per_s'])} | {t['mb_per_s']:.1f} | {t['cpu_s']:.2f} "
                f"| {fmt_rate(t['lines_per_cpu_s'])} | {mb(t['maxrss_kb'])} | {t['ratio_vs_mtail']:.2f}x | {t['cpu_ratio_vs_mtail']:.2f}x |"
            )
        md.append("")
        md.append("### Correctness (sums over all series; counters must be identical)\n")
        md += head(["value", "truth", "mtail", "exporter", "ok"], centered=(4,))
        for r in results["verify"]["rows"]:
            md.append(f"| {r['what']} | {r['truth']} | {r['mtail']} | {r['exporter']} | {'yes' if r['ok'] else '**NO**'} |")
        md.append("")
    if "stages" in results:
        sg = results["stages"]
        md.append(
            f"### Per stage and per sample: {sg['file']} ({sg['samples']:,} samples; bench/stages.py, CPU s, minimum of {sg['reps']})\n"
        )
        md += head(["stage (cumulative)", "CPU s", "stage s", "us per sample"])
        for st in sg["stages"]:
            per = st["us_per_sample"]
            md.append(f"| {st['stage']} | {st['total_s']:.3f} | {st['stage_s']:.3f} | {'' if per is None else f'{per:.2f}'} |")
        md.append(
            f"\nSample path (parse + apply + rules): **{sg['sample_path_us']:.2f} us per sample**; imports {sg['imports_s']:.3f} s.\n"
        )
    if "vllm" in results:
        v = results["vllm"]
        md.append(f"### vLLM replay: {v['file']} ({v['lines']:,} lines, {v['bytes'] / 1e6:.0f} MB; no mtail program)\n")
        md += head(["lines/s", "stats lines (truth)", "stats lines (exporter)", "running (truth / exporter)"], first_left=False)
        md.append(
            f"| {fmt_rate(v['lines_per_s'])} | {v['stats_lines_truth']} | {v['stats_lines_exporter']} | {v['running_truth']} / {v['running_exporter']} |"
        )
        md.append("")
    if "formats" in results:
        fm = results["formats"]
        md.append(
            f"### Formats: {fm['file']} ({fm['lines']:,} lines) in every format (bench/formats.py); replay against mtail on the "
            f"default rendering, interleaved, median of {results['reps']}\n"
        )
        md.append(f"mtail `--one_shot` on the default rendering: {fm['mtail_wall_s']:.2f} s wall, {fm['mtail_cpu_s']:.2f} s CPU.\n")
        md += head(
            [
                "format",
                "MB",
                "wall s",
                "CPU s",
                "us per line (CPU)",
                "vs mtail (wall)",
                "vs mtail (CPU)",
                "peak RSS",
                "RSS vs default",
                "decode batches (truth " + str(fm["truth"]) + ")",
            ]
        )
        for r in fm["rows"]:
            md.append(
                f"| {r['format']} | {r['bytes'] / 1e6:.0f} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['us_per_line']:.2f} | "
                f"{r['vs_mtail']:.2f}x | {r['cpu_vs_mtail']:.2f}x | {mb(r['maxrss_kb'])} | {r['rss_vs_default']:.2f} | {r['decode_batches']:.0f} |"
            )
        md.append("")
    if "burst" in results:
        b = results["burst"]
        md.append(
            f"### Burst: {b['file']} ({b['lines']:,} lines at {b['rate']:g} lines per second of log time), median of {results['reps']}\n"
        )
        md += head(["tool", "wall s", "CPU s", "vs mtail (wall)", "vs mtail (CPU)"])
        md.append(f"| mtail --one_shot | {b['mtail_wall_s']:.2f} | {b['mtail_cpu_s']:.2f} | 1.00x | 1.00x |")
        md.append(
            f"| hybrid-cache-exporter replay | {b['wall_s']:.2f} | {b['cpu_s']:.2f} | {b['vs_mtail']:.2f}x | {b['cpu_vs_mtail']:.2f}x |"
        )
        md.append("")
    if "scaling" in results:
        sc = results["scaling"]
        md.append("### Scaling (exporter replay)\n")
        md += head(["input", "lines", "lines/s", "vs baseline"])
        for r in sc["rows"]:
            md.append(f"| {r['input']} | {r['lines']:,} | {fmt_rate(r['lines_per_s'])} | {r['ratio']:.2f}x |")
        md.append("")
    if "live" in results:
        lv = results["live"]
        md.append(
            f"### Live tail ({lv['lines']} decode lines at {lv['rate_per_s']:.0f}/s, /metrics polled every {lv['poll_interval_ms']} ms)\n"
        )
        md += head(["daemon", "write->visible p50", "p99", "max", "missed", "idle CPU", "idle RSS"])
        for name, lat in lv["latency"].items():
            idle = lv["idle"].get(name, {})
            md.append(
                f"| {name} | {lat['p50_ms']:.1f} ms | {lat['p99_ms']:.1f} ms | {lat['max_ms']:.1f} ms | {lat['missed']} | "
                f"{idle.get('cpu_pct', float('nan')):.3f}% ({idle.get('seconds', 0):.0f} s) | {mb(idle.get('rss_kb', 0))} |"
            )
        md.append("")
    if "soak" in results:
        sk = results["soak"]
        md.append(f"### Soak: serve, {sk['lines']:,} lines over {sk['rotations']} rename rotations\n")
        md += head(["rotations", "lines", "RSS", "peak RSS", "elapsed"], first_left=False)
        for s in sk["samples"]:
            md.append(f"| {s['rotations']} | {s['lines']:,} | {mb(s['rss_kb'])} | {mb(s['hwm_kb'])} | {s['elapsed_s']:.0f} s |")
        if sk.get("lost"):
            md.append(f"\n**Lines lost**: {sk['lost']}")
        md.append("")
    if results.get("warnings"):
        md.append("### Warnings\n")
        md.extend(f"- {w}" for w in results["warnings"])
        md.append("")
    return "\n".join(md)


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="hybrid-cache-exporter vs mtail benchmark")
    ap.add_argument("--quick", action="store_true", help="CI smoke: small inputs, 3 s idle, no 10M soak")
    ap.add_argument("--out", default=str(BENCH / "out"), help="results directory (default bench/out)")
    ap.add_argument("--data", default=str(BENCH / "out" / "data"), help="cache of generated logs (default bench/out/data)")
    ap.add_argument(
        "--at", metavar="REV", help="benchmark the exporter as committed at REV (git archive into OUT/src-REV), not the work tree"
    )
    ap.add_argument("--snapshot", action="store_true", help="benchmark a frozen copy of the work tree's exporter (OUT/src-worktree)")
    ap.add_argument("--exporter", help="exporter command (default .venv/bin/hybrid-cache-exporter); run as given, not byte-compiled")
    ap.add_argument(
        "--no-compile",
        action="store_true",
        help="do not byte-compile the exporter's packages first (default: compile them as pip install does, see docs/performance.md)",
    )
    ap.add_argument("--mtail", default=shutil.which("mtail"), help="mtail binary (default: from PATH)")
    ap.add_argument("--lines", type=int, help="lines of the main throughput file")
    ap.add_argument("--reps", type=int, help="runs per throughput measurement (median)")
    ap.add_argument("--idle", type=float, help="idle CPU window, seconds")
    ap.add_argument("--soak-lines", type=int)
    ap.add_argument("--soak-rotations", type=int)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=N",
        help="override a size, e.g. --set grow_large=1000000 (fields: {})".format(", ".join(Profile.__dataclass_fields__)),
    )
    ap.add_argument("--skip", default="", help="comma list of sections to skip: throughput,stages,scaling,vllm,formats,burst,live,soak")
    ap.add_argument("--profile", action="store_true", help="also profile replay (cProfile, py-spy if installed)")
    a = ap.parse_args(argv)

    prof = QUICK if a.quick else FULL
    for attr, val in (
        ("lines", a.lines),
        ("reps", a.reps),
        ("idle", a.idle),
        ("soak_lines", a.soak_lines),
        ("soak_rotations", a.soak_rotations),
    ):
        if val is not None:
            setattr(prof, attr, val)
    for kv in a.set:
        k, _, v = kv.partition("=")
        if k not in Profile.__dataclass_fields__ or k == "name":
            ap.error(f"--set: unknown field {k!r}")
        setattr(prof, k, type(getattr(prof, k))(float(v)) if isinstance(getattr(prof, k), int) else float(v))
    skip = {s.strip() for s in a.skip.split(",") if s.strip()}

    if not a.mtail or not Path(a.mtail).exists():
        print("SKIP: mtail is not installed (apt-get install -y mtail); benchmark not run")
        return 0
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "raw"
    raw.mkdir(exist_ok=True)
    data = Path(a.data)
    try:
        exp = exporter_cmd(a.exporter)
        bytecode = not_compiled()
        if a.at or a.snapshot:
            snap = snapshot(out, a.at)
            exp = snapshot_cmd(snap)
            if not a.no_compile:
                bytecode = byte_compile(snap)
        elif not a.exporter and not a.no_compile:
            bytecode = byte_compile(ROOT) + ", the editable install's work tree"
        mtail_ver = subprocess.run([a.mtail, "--version"], capture_output=True, text=True).stdout.split(" git ")[0].strip()
        results: dict = {
            "profile": prof.name,
            "reps": prof.reps,
            "env": {
                "date": time.strftime("%Y-%m-%d %H:%M"),
                "cpus": os.cpu_count(),
                "machine": platform.machine(),
                "python": platform.python_version(),
                "mtail": mtail_ver,
                "exporter_cmd": exp,
                "scanner": scanner_of(exp),
                "commit": subprocess.run(
                    ["git", "-C", str(ROOT), "rev-parse", "--short", a.at or "HEAD"], capture_output=True, text=True
                ).stdout.strip()
                + ("" if a.at else " + work tree" + (" (snapshot)" if a.snapshot else "")),
                "bytecode": bytecode,
                "startup": startup(exp, data, prof.reps, raw),
            },
            "warnings": [],
        }
        failures: list[str] = []

        # 1+2: throughput and correctness on the main file
        path, truth = ensure_log("sglang", prof.lines, a.seed, data, rate=prof.rate)
        size = path.stat().st_size
        if "throughput" not in skip:
            log(f"throughput on {path.name}: {prof.lines:,} lines, {size / 1e6:.0f} MB, {prof.reps} reps")
            tools = [
                Tool("grep -c (floor)", ["grep", "-c", "Decode batch", str(path)]),
                Tool("mtail --one_shot", mtail_cmd(a.mtail, path)),
                Tool("hybrid-cache-exporter replay", [*exp, "replay", str(path)]),
                # what a machine without a C compiler gets
                Tool("replay, pure-Python scanner", ["env", "HCE_PURE_PYTHON=1", *exp, "replay", str(path)]),
            ]
            throughput(prof.lines, tools, prof.reps, raw)
            mt_rate = prof.lines / tools[1].median().wall
            mt_cpu_rate = prof.lines / max(1e-3, statistics.median(r.user + r.sys for r in tools[1].runs))
            rows = []
            for t in tools:
                m = t.median()
                rate = prof.lines / m.wall
                rows.append(
                    {
                        "name": t.name,
                        "cmd": t.cmd,
                        "wall_s": m.wall,
                        "walls": [r.wall for r in t.runs],
                        "lines_per_s": rate,
                        "mb_per_s": size / m.wall / 1e6,
                        "cpu_s": m.user + m.sys,
                        "maxrss_kb": max(r.maxrss_kb for r in t.runs),
                        "ratio_vs_mtail": rate / mt_rate,
                        "lines_per_cpu_s": prof.lines / max(1e-3, statistics.median(r.user + r.sys for r in t.runs)),
                        "cpu_ratio_vs_mtail": prof.lines / max(1e-3, statistics.median(r.user + r.sys for r in t.runs)) / mt_cpu_rate,
                    }
                )
            results["throughput"] = {"file": path.name, "lines": prof.lines, "bytes": size, "tools": rows}
            rws, errs, warns = verify(tools[1].runs[-1].stdout, tools[2].runs[-1].stdout, truth)
            errs += [f"pure-Python scanner: {e}" for e in verify(tools[1].runs[-1].stdout, tools[3].runs[-1].stdout, truth)[1]]
            results["verify"] = {"rows": rws, "errors": errs}
            results["warnings"] += warns
            failures += [f"count mismatch: {e}" for e in errs]
            log("verify: " + ("counts IDENTICAL (truth = mtail = exporter)" if not errs else "MISMATCH: " + "; ".join(errs)))

        # 2b: where replay's time goes, per stage and per sample (bench/stages.py, in the same code)
        if "stages" not in skip:
            log(f"stages: scan, parse, apply, rules on {path.name}")
            results["stages"] = stages(exp, path, prof.reps)

        # 3: scaling
        if "scaling" not in skip:
            small, _ = ensure_log("sglang", prof.grow_small, a.seed + 1, data)
            large, _ = ensure_log("sglang", prof.grow_large, a.seed + 2, data)
            multi = []
            for i in range(prof.multi_files):
                p, _ = ensure_log("sglang", prof.multi_lines, 100 + i, data, tag=f"-part{i}")
                multi.append(p)
            single, _ = ensure_log("sglang", prof.multi_lines * prof.multi_files, 99, data)
            sc_tools = [
                Tool(f"replay {prof.grow_small:,}", [*exp, "replay", str(small)]),
                Tool(f"replay {prof.grow_large:,}", [*exp, "replay", str(large)]),
                Tool(f"replay 1 file x {prof.multi_lines * prof.multi_files:,}", [*exp, "replay", str(single)]),
                Tool(f"replay {prof.multi_files} files x {prof.multi_lines:,}", [*exp, "replay", *map(str, multi)]),
            ]
            sizes = [prof.grow_small, prof.grow_large, prof.multi_lines * prof.multi_files, prof.multi_lines * prof.multi_files]
            log("scaling: file growth and many files")
            for t, n in zip(sc_tools, sizes, strict=True):
                throughput(n, [t], prof.reps, raw)
            rates = [n / t.median().wall for t, n in zip(sc_tools, sizes, strict=True)]
            results["scaling"] = {
                "rows": [
                    {"input": f"{prof.grow_small:,} lines", "lines": sizes[0], "lines_per_s": rates[0], "ratio": 1.0},
                    {"input": f"{prof.grow_large:,} lines", "lines": sizes[1], "lines_per_s": rates[1], "ratio": rates[1] / rates[0]},
                    {"input": "1 file", "lines": sizes[2], "lines_per_s": rates[2], "ratio": 1.0},
                    {"input": f"{prof.multi_files} files", "lines": sizes[3], "lines_per_s": rates[3], "ratio": rates[3] / rates[2]},
                ]
            }
            mexp = parse_prom(sc_tools[3].runs[-1].stdout.read_text(errors="replace"))
            want = sum(json.loads(Path(str(p) + ".truth.json").read_text())["decode_batches"] for p in multi)
            got = sum_metric(mexp, "hybrid_cache_decode_batches_total")
            if got != want:
                failures.append(f"replay of {prof.multi_files} files: decode batches {got}, truth {want}")

        # 3b: vLLM replay (no mtail program for it): throughput and stats-line count vs truth
        if "vllm" not in skip:
            vpath, vtruth = ensure_log("vllm", prof.vllm_lines, a.seed, data)
            vt = Tool("replay vLLM", [*exp, "replay", str(vpath)])
            log(f"vllm: replay {vpath.name}")
            throughput(prof.vllm_lines, [vt], prof.reps, raw)
            vs = parse_prom(vt.runs[-1].stdout.read_text(errors="replace"))
            got = sum_metric(vs, "hybrid_cache_stats_lines_total")
            run_last = last_metric(vs, "hybrid_cache_running_requests")
            results["vllm"] = {
                "file": vpath.name,
                "lines": prof.vllm_lines,
                "bytes": vpath.stat().st_size,
                "lines_per_s": prof.vllm_lines / vt.median().wall,
                "stats_lines_truth": vtruth["stats_lines"],
                "stats_lines_exporter": got,
                "running_truth": vtruth["last"].get("running"),
                "running_exporter": run_last,
            }
            if got != vtruth["stats_lines"]:
                failures.append(f"vLLM replay: stats lines {got}, truth {vtruth['stats_lines']}")

        # 3c: the same SGLang log in every format a server or its platform writes (bench/formats.py),
        # each replayed against mtail on the default rendering of that log, interleaved in one run
        if "formats" not in skip:
            n_fmt = prof.formats_lines or prof.lines
            fpath, ftruth = ensure_log("sglang", n_fmt, a.seed, data, rate=prof.rate)
            files = {fmt: formats.render_file(fpath, fmt, fpath.with_name(f"{fpath.stem}.{fmt}.log")) for fmt in formats.FORMATS}
            ftools = [Tool("mtail --one_shot", mtail_cmd(a.mtail, files["default"]))]
            ftools += [Tool(fmt, [*exp, "replay", str(files[fmt])]) for fmt in formats.FORMATS]
            log(f"formats: replay {fpath.name} in {', '.join(formats.FORMATS)}, mtail on the default rendering between them")
            throughput(n_fmt, ftools, prof.reps, raw)
            mt = ftools[0]
            mt_wall = mt.median().wall
            mt_cpu = statistics.median(r.user + r.sys for r in mt.runs)
            base_rss = max(r.maxrss_kb for r in ftools[1].runs)
            rows = []
            for t in ftools[1:]:
                fs = parse_prom(t.runs[-1].stdout.read_text(errors="replace"))
                got = sum_metric(fs, "hybrid_cache_decode_batches_total")
                wall = t.median().wall
                cpu = statistics.median(r.user + r.sys for r in t.runs)
                rss = max(r.maxrss_kb for r in t.runs)
                rows.append(
                    {
                        "format": t.name,
                        "bytes": files[t.name].stat().st_size,
                        "wall_s": wall,
                        "walls": [r.wall for r in t.runs],
                        "cpu_s": cpu,
                        "lines_per_s": n_fmt / wall,
                        "us_per_line": cpu / n_fmt * 1e6,
                        "vs_mtail": mt_wall / wall,
                        "cpu_vs_mtail": mt_cpu / max(cpu, 1e-3),
                        "maxrss_kb": rss,
                        "rss_vs_default": rss / base_rss,
                        "decode_batches": got,
                    }
                )
                if got != ftruth["decode_batches"]:
                    failures.append(f"formats: {t.name}: decode batches {got}, truth {ftruth['decode_batches']}")
            results["formats"] = {
                "file": fpath.name,
                "lines": n_fmt,
                "truth": ftruth["decode_batches"],
                "mtail_wall_s": mt_wall,
                "mtail_walls": [r.wall for r in mt.runs],
                "mtail_cpu_s": mt_cpu,
                "rows": rows,
            }

        # 3d: the burst log: the main file's size at burst_rate lines per second of log time (a server
        # in a burst of traffic: ten times the busy one's lines per 10-s bucket, so a tenth of the
        # samples per line), the default header against mtail, interleaved
        if "burst" not in skip:
            bpath, btruth = ensure_log("sglang", prof.lines, a.seed, data, rate=prof.burst_rate)
            btools = [
                Tool("mtail --one_shot", mtail_cmd(a.mtail, bpath)),
                Tool("hybrid-cache-exporter replay", [*exp, "replay", str(bpath)]),
            ]
            log(f"burst: {bpath.name}")
            throughput(prof.lines, btools, prof.reps, raw)
            bm, be = btools
            b_cpu = statistics.median(r.user + r.sys for r in be.runs)
            m_cpu = statistics.median(r.user + r.sys for r in bm.runs)
            results["burst"] = {
                "file": bpath.name,
                "lines": prof.lines,
                "rate": prof.burst_rate,
                "mtail_wall_s": bm.median().wall,
                "mtail_cpu_s": m_cpu,
                "wall_s": be.median().wall,
                "walls": [r.wall for r in be.runs],
                "mtail_walls": [r.wall for r in bm.runs],
                "cpu_s": b_cpu,
                "vs_mtail": bm.median().wall / be.median().wall,
                "cpu_vs_mtail": m_cpu / max(b_cpu, 1e-3),
            }
            got = sum_metric(parse_prom(be.runs[-1].stdout.read_text(errors="replace")), "hybrid_cache_decode_batches_total")
            if got != btruth["decode_batches"]:
                failures.append(f"burst: decode batches {got}, truth {btruth['decode_batches']}")

        # 4: live latency + idle
        if "live" not in skip:
            results["live"] = live(exp, a.mtail, prof, raw)
            for name, lat in results["live"]["latency"].items():
                if lat["missed"]:
                    failures.append(f"live: {name} never showed {lat['missed']} of {prof.live_lines} lines")

        # 5: soak
        if "soak" not in skip:
            log(f"soak: {prof.soak_lines:,} lines, {prof.soak_rotations} rotations")
            results["soak"] = soak(exp, prof, raw)
            if results["soak"].get("lost"):
                failures.append(f"soak: lines lost across rotation: {results['soak']['lost']}")

        if a.profile:
            log("profile: cProfile/py-spy of replay")
            ppath, _ = ensure_log("sglang", prof.lines, a.seed, data, rate=prof.rate)
            results["profile_data"] = profile(exp, ppath, out)

        results["failures"] = failures
        md = render(results)
        (out / "results.md").write_text(md + "\n")
        (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
        print(md)
        if failures:
            print("\nFAIL:", file=sys.stderr)
            for f in failures:
                print(f"  - {f}", file=sys.stderr)
            return 1
        print(f"\nOK: results in {out}/results.md")
        return 0
    except BenchError as e:
        print(f"ERROR: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
