"""Where replay's time goes, per stage and per sample (docs/performance.md, "Per sample").

Replays one file in this process four times over, each time with one more stage of the sample
path switched on, and prints the time of each stage divided by the number of samples the rules
saw:

1. ``scan``: reading, the bulk scanner and counting; the samples are dropped unparsed;
2. ``parse``: plus parsing each sample into its event (``parse_line``);
3. ``apply``: plus folding the sample into the state (gauges), no observers;
4. ``rules``: plus the rules and the recommendations (what ``replay`` runs).

Each variant runs ``--reps`` times interleaved (scan, parse, apply, rules, scan, ...) and the
minimum CPU time (``time.process_time``) is kept: the cost of a stage is the difference of two
minima, which a shared machine disturbs least. Start-up (imports) is not in these figures; it is
printed once, as the import time of the composition root measured in a fresh interpreter.

    .venv/bin/python bench/stages.py bench/out/data/sglang-2000000-s42-r10.log --reps 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # last: a frozen copy on PYTHONPATH (bench/run.py --snapshot) comes first

from exporter.app import new_pipeline  # noqa: E402
from exporter.reading.offline import replay_files  # noqa: E402
from exporter.state.pipeline import Pipeline  # noqa: E402


class _ScanOnly(Pipeline):
    """The samples are dropped: what the scanner, the counters and the buckets cost alone."""

    def _play(self, src, ss):
        due, ss.due = ss.due, []
        for x in due:
            if type(x) is not tuple:  # (a gauge field a sample held is not a sample)
                self._sample(src, ss, x)

    def _sample(self, src, ss, x):
        self.samples += 1


class _ParseOnly(_ScanOnly):
    """The samples are parsed into their events, and not applied."""

    def _sample(self, src, ss, x):
        self.samples += 1
        self.sampler.parsed(src, ss, x)


def _counting(pipe):
    pipe.samples = 0
    return pipe


VARIANTS = {
    "scan": lambda: _counting(_ScanOnly()),
    "parse": lambda: _counting(_ParseOnly()),
    "apply": lambda: Pipeline(),
    "rules": lambda: new_pipeline(),
}


def run(variant: str, path: str) -> tuple[float, object]:
    pipe = VARIANTS[variant]()
    t0 = time.process_time()
    replay_files(pipe, [path], None)
    pipe.finish()
    return time.process_time() - t0, pipe


def samples_of(path: str) -> int:
    """How many samples the rules see: the applied batch events of a replay."""
    n = 0
    pipe = Pipeline()

    def count(src, srv, line, raw):
        nonlocal n
        n += type(line.event).__name__ == "BatchStats"

    pipe.observers.append(count)
    replay_files(pipe, [path], None)
    pipe.finish()
    return n


def import_seconds() -> float:
    """CPU seconds a fresh interpreter spends importing what ``replay`` loads: the face's replay
    module and the composition root (``exporter.cli`` alone loads no subcommand)."""
    code = "import time; t = time.process_time(); import exporter.cli.replay; print(time.process_time() - t)"
    # the same interpreter flags (-S of a frozen copy); -P: not the work tree in the cwd first
    flags = ["-S"] if sys.flags.no_site else []
    out = subprocess.run([sys.executable, *flags, "-P", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(out.stdout)


def measure(path: str, reps: int) -> dict:
    """The figures: samples, the minimum CPU seconds of each variant, each stage's seconds and
    microseconds per sample, the sample path per sample, and the import seconds."""
    n = samples_of(path)
    best = {v: float("inf") for v in VARIANTS}
    for _ in range(reps):
        for v in VARIANTS:
            best[v] = min(best[v], run(v, path)[0])
    stages, prev = [], 0.0
    for v, t in best.items():
        stages.append({"stage": v, "total_s": t, "stage_s": t - prev, "us_per_sample": None if v == "scan" else (t - prev) / n * 1e6})
        prev = t
    return {
        "file": Path(path).name,
        "samples": n,
        "reps": reps,
        "stages": stages,
        "sample_path_us": (best["rules"] - best["scan"]) / n * 1e6,
        "imports_s": import_seconds(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="an SGLang log (bench/gen.py writes one)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON (bench/run.py reads them)")
    a = ap.parse_args(argv)
    r = measure(a.log, a.reps)
    if a.json:
        print(json.dumps(r))
        return 0
    print(f"{a.log}: {r['samples']:,} samples; CPU seconds, minimum of {a.reps}")
    print(f"{'stage':<8} {'total s':>8} {'stage s':>8} {'us/sample':>10}")
    for st in r["stages"]:
        per = st["us_per_sample"]
        print(f"{st['stage']:<8} {st['total_s']:8.3f} {st['stage_s']:8.3f} {'' if per is None else f'{per:.2f}':>10}")
    print(f"sample path (parse + apply + rules): {r['sample_path_us']:.2f} us/sample")
    print(f"imports (fresh interpreter): {r['imports_s']:.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
