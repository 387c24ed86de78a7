"""The real SGLang in the loop: SGLang 0.5.23 on the CPU torch, serving tiny models built in code, its log appended
to one file the sidecar follows (docs/engine-suite.md, "SGLang").

No tests here: ``tests/engine/test_sglang_*.py`` use it.

* :func:`sglang_python` installs the engine once (``tests/engine/install_sglang.sh``: its own virtual environment in
  the cache outside the clone, the project's stand-ins copied in) and returns its interpreter; ``HCE_SGLANG_PYTHON_BIN``
  points at another ready environment.
* :class:`Engine` is one ``python -m sglang.launch_server --device cpu`` process group whose stdout and stderr are
  appended (``O_APPEND``) to one log file, on 127.0.0.1 only, stopped by process group.
* :func:`batch_lines` reads SGLang's batch lines as the tests compare them (not the exporter's parser).

SGLang's scheduler, memory pools, radix cache and logging run unpatched; what is replaced is listed in
``tests/engine/sglang_cpu/`` and docs/engine-suite.md.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import harness as h

VERSION = "0.5.23"
FIXTURES = h.ROOT / "fixtures" / "engine" / f"sglang-cpu-{VERSION}"
READY = "The server is fired up and ready to roll!"


def sglang_python() -> str:
    """The SGLang engine's interpreter, installed on first use (fails with the installer's reason)."""
    return h.installed_python("install_sglang.sh", "HCE_SGLANG_PYTHON_BIN", "SGLang")


def env_dir() -> str:
    return str(Path(sglang_python()).parent.parent)


def build_model(family: str, out: Path) -> Path:
    """A tiny model of ``family`` (tests/engine/tinymodel.py) written by SGLang's interpreter (its transformers)."""
    return h.build_model(family, out, python=sglang_python())


@dataclass
class Engine(h.Engine):
    """One SGLang server process group appending to ``log`` (``harness.Engine``'s start, stop and log handling).
    ``args`` follow the suite's defaults (the CPU, the ``torch_native`` attention backend, no warmup request, metrics
    on, one decode line per ``decode_log_interval`` decode steps)."""

    served_name: str = "tiny"
    decode_log_interval: int = 4
    ENGINE = "SGLang"

    def command(self) -> list[str]:
        return [
            sglang_python(),
            "-m",
            "sglang.launch_server",
            "--model-path",
            str(self.model),
            "--served-model-name",
            self.served_name,
            "--device",
            "cpu",
            "--attention-backend",
            "torch_native",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--skip-server-warmup",
            "--enable-metrics",
            "--mem-fraction-static",
            "0.05",
            "--decode-log-interval",
            str(self.decode_log_interval),
            *self.args,
        ]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in h._base_env().items() if not k.startswith("SGLANG_")}
        env.update(SGLANG_USE_CPU_ENGINE="1")
        return env

    def ready(self) -> bool:
        """This boot logged that it is ready, and ``/health`` answers."""
        return READY in self.this_boot() and super().ready()

    def terminate(self) -> None:
        """SIGTERM to the server process, what a container runtime sends its first process: SGLang drains and stops
        its children itself (SIGKILL to the group follows after the stop's timeout)."""
        os.kill(self.proc.pid, signal.SIGTERM)

    def stop(self, timeout: float = 30) -> None:
        super().stop(timeout)

    def scheduler_pid(self) -> int:
        """The scheduler process (``setproctitle`` names it ``sglang::scheduler``), a child of the server."""
        out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(self.proc.pid)], capture_output=True, text=True).stdout
        pids = [int(line.split()[0]) for line in out.splitlines() if "sglang::scheduler" in line]
        assert len(pids) == 1, f"one scheduler process expected among the server's children:\n{out}"
        return pids[0]


def with_flag(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """``args`` with ``flag`` set to ``value`` (a switch, value ``true``: the flag alone)."""
    out = list(args)
    if flag in out:
        out[out.index(flag) + 1] = value
    else:
        out += [flag] if value == "true" else [flag, value]
    return tuple(out)


def advice_boots(model: Path, workdir: Path, source: str, boots: list[tuple[tuple[str, ...], str]], skip=(), **engine) -> dict:
    """Every recommendation the exporter exported for ``source`` in each ``(a boot's args, exposition then)``, applied
    to those args on a boot of its own (a log of its own): ``{(args, (flag, value)): (why not or None, its log)}``;
    None when SGLang got ready with it, else why not (it refused the flag at startup, or an environment variable the
    harness does not set). ``skip``: advice not to boot (one the scenario applies itself)."""
    out: dict = {}
    for args, exposition in boots:
        for lab, _ in h.samples(exposition, "hybrid_cache_recommendation_info", source=source):
            advice = (lab["flag"], lab["value"])
            if advice in skip or (args, advice) in out:
                continue
            flag, value = advice
            if not flag.startswith("--"):
                out[(args, advice)] = (f"{flag}: an environment variable, not booted here", "")
                continue
            log = workdir / f"{source}-advice{flag.replace('-', '_')}-{len(out)}.log"
            eng = Engine(model, log, with_flag(args, flag, value), **engine)
            try:
                eng.start()
                out[(args, advice)] = (None, eng.this_boot())
            except AssertionError as e:
                out[(args, advice)] = (str(e)[-600:], h.read(log))  # start() created the log
            finally:
                eng.stop()
    return out


# --------------------------------------------------------------------------------------------
# SGLang's log, as the tests read it (independently of the exporter's parsers)

DECODE_RE = re.compile(
    r"^\[(?P<ts>[\d: -]{19})[^\]]*\] Decode batch, #running-req: (?P<running>\d+), #full token: (?P<tokens>\d+), "
    r"full token usage: (?P<kv>[\d.]+), mamba num: (?P<mamba_num>\d+), mamba usage: (?P<mamba>[\d.]+), "
    r"cpu graph: \w+, gen throughput \(token/s\): (?P<gen>[\d.]+), #queue-req: (?P<queued>\d+)$",
    re.M,
)
PREFILL_RE = re.compile(
    r"^\[(?P<ts>[\d: -]{19})[^\]]*\] Prefill batch, #new-seq: (?P<new_seq>\d+), #new-token: (?P<new_tokens>\d+), "
    r"#cached-token: (?P<cached>\d+), full token usage: (?P<kv>[\d.]+), mamba usage: (?P<mamba>[\d.]+), "
    r"#running-req: (?P<running>\d+), #queue-req: (?P<queued>\d+), #pending-token: \d+, cpu graph: \w+, "
    r"input throughput \(token/s\): (?P<input>[\d.]+)$",
    re.M,
)
ANY_BATCH_RE = re.compile(r"^\[[^\]]*\] (?:Prefill|Decode) batch[ ,]", re.M)


def batch_lines(text: str) -> list[re.Match]:
    """Every prefill and decode line, in log order (each matched by the full shape the suite's boots print)."""
    out = sorted([*DECODE_RE.finditer(text), *PREFILL_RE.finditer(text)], key=lambda m: m.start())
    n = len(ANY_BATCH_RE.findall(text))
    assert len(out) == n, f"{n - len(out)} batch line(s) of a shape the suite does not know"
    return out


def decode_lines(text: str) -> list[re.Match]:
    return list(DECODE_RE.finditer(text))


def standard_replacements(workdir: Path) -> dict[str, str]:
    return {**h.standard_replacements(workdir), env_dir(): "/opt/sglang-cpu"}


def save_fixture(log: Path, name: str, workdir: Path) -> Path | None:
    """With ``HCE_ENGINE_FIXTURES=1``: the scrubbed log as ``fixtures/engine/sglang-cpu-0.5.23/<name>.log``."""
    if os.environ.get("HCE_ENGINE_FIXTURES") != "1":
        return None
    FIXTURES.mkdir(parents=True, exist_ok=True)
    text = h.scrub(h.read(log), standard_replacements(workdir))
    leak = h.LEAKS.search(text)
    assert leak is None, f"{name}: a path of this machine is left after scrubbing: {text[leak.start() - 80 : leak.end() + 40]!r}"
    out = FIXTURES / f"{name}.log"
    out.write_text(text)
    return out
