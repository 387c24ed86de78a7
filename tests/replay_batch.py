"""``replay`` of many logs in one process: the command line's own entry (``exporter.cli.main``) called once
per log, each with its own argument list, its own stdout and stderr and its exit code.

Why: a ``replay`` process spends ~0.4 s importing the exporter and a few milliseconds on a fixture, and the
golden checks replay every fixture five ways (native and pure-Python scanner, two file years, a faked clock):
a process per log was ~370 process starts, the largest share of ``make test``. One process per batch runs
exactly the code a ``replay`` process runs after its imports (argument parsing included), under the same
environment (``TZ``, ``$HCE_LOG_YEAR``, ``HCE_PURE_PYTHON``, a ``faketime`` prefix); a replay that left state
behind for the next one would show as a golden diff. The console command itself, one process per log, is
run by tests/cli (test_replay_cli.py, test_subcommands.py) and by tests/e2e/test_packaging.py on the wheel.

As a script: reads a JSON list of argument lists on stdin, writes a JSON list of
``{"rc", "stdout", "stderr"}`` on stdout.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_batch(argvs: list[list[str]], env: dict[str, str] | None = None, prefix: tuple[str, ...] = (), cwd: Path = ROOT) -> list[dict]:
    """Each argument list of ``argvs`` (``["replay", ...]``) run by one child process, in order."""
    if not argvs:
        return []
    p = subprocess.run(
        [*prefix, sys.executable, str(Path(__file__).resolve())],
        input=json.dumps(argvs).encode(),
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )
    assert p.returncode == 0, f"replay batch failed (rc {p.returncode}): {p.stderr.decode()[-3000:]}"
    out = json.loads(p.stdout)
    assert len(out) == len(argvs), (len(out), len(argvs))
    return out


def replay_many(argvs: list[list[str]], env: dict[str, str] | None = None, prefix: tuple[str, ...] = (), procs: int = 2) -> list[dict]:
    """:func:`run_batch` split over ``procs`` child processes (the machine's two cores), results in order."""
    procs = max(1, min(procs, len(argvs)))
    chunks = [argvs[i::procs] for i in range(procs)]
    with ThreadPoolExecutor(max_workers=procs) as ex:
        parts = list(ex.map(lambda c: run_batch(c, env, prefix), chunks))
    out: list[dict] = [{}] * len(argvs)
    for i, part in enumerate(parts):
        out[i::procs] = part
    return out


def _main() -> int:
    sys.path[0] = str(ROOT)  # not tests/, whose layer directories are named like the packages
    from exporter.cli import main

    argvs = json.load(sys.stdin)
    real_out, real_err = sys.stdout, sys.stderr
    results = []
    for argv in argvs:
        out, err = io.BytesIO(), io.BytesIO()
        sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse's exits
            rc = e.code if isinstance(e.code, int) else 2
        finally:
            for wrapper in (sys.stdout, sys.stderr):
                wrapper.flush()
                wrapper.detach()  # keeps the BytesIO open
            sys.stdout, sys.stderr = real_out, real_err
        results.append({"rc": rc, "stdout": out.getvalue().decode("utf-8"), "stderr": err.getvalue().decode("utf-8", "replace")})
    json.dump(results, real_out)
    real_out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_main())
