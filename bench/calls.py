"""What one firing line costs in calls: the Python calls made while the line that turns a finding on
is fed, and how often the call path changes module (docs/architecture.md, "The path of one line").

Feeds a log line by line through the pipeline ``replay`` builds, finds the first line after which
the rule's finding is on (with sampling, the line that closes the sample's 10-s bucket: the
sample, the rules and the recommendations run while it is fed), then feeds the log again up to
that line and counts, with ``sys.setprofile``, every call of a Python function made while it is
fed. A *module switch* is a call whose function lives in another module than its caller's.

    .venv/bin/python bench/calls.py fixtures/scenarios/sglang-mamba-bound.log --rule mamba_bound
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))

from exporter.app import new_pipeline  # noqa: E402


def _module(code) -> str:
    p = Path(code.co_filename)
    try:
        rel = p.resolve().relative_to(ROOT)
    except ValueError:
        return p.stem if "prometheus_client" not in str(p) else "prometheus_client"
    return str(rel.with_suffix("")).replace("/", ".")


def firing_line(lines: list[str], rule: str) -> int:
    """The index of the first line after whose feeding ``rule`` is on for some server."""
    pipe = new_pipeline()
    for i, line in enumerate(lines):
        pipe.feed("s", line)
        src = pipe.sources["s"]
        if any(srv.findings.get(rule) for srv in src.servers.values()):
            return i
    raise SystemExit(f"{rule} never fires")


def measure(path: str, rule: str) -> dict:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    at = firing_line(lines, rule)
    pipe = new_pipeline()
    for line in lines[:at]:
        pipe.feed("s", line)
    calls: list[tuple[str, str, str]] = []  # (caller module, callee module, callee)

    def prof(frame, event, arg):
        if event == "call":
            code, back = frame.f_code, frame.f_back
            calls.append((_module(back.f_code) if back is not None else "", _module(code), code.co_qualname))

    sys.setprofile(prof)
    try:
        pipe.feed("s", lines[at])
    finally:
        sys.setprofile(None)
    calls = calls[1:]  # the feed call itself
    switches = sum(1 for a, b, _ in calls if a != b)
    # the line's own path: up to the rules' transition reaching the recommendations (the rest is theirs)
    upto = next((i for i, (_, m, _) in enumerate(calls) if m == "exporter.advice.recommend"), len(calls))
    path_calls = calls[:upto]
    route: list[str] = []
    for _, mod, _ in calls:
        if not route or route[-1] != mod:
            route.append(mod)
    return {
        "file": Path(path).name,
        "rule": rule,
        "line": at + 1,
        "calls": len(calls),
        "functions": len({(m, f) for _, m, f in calls}),
        "module_switches": switches,
        "path_calls": len(path_calls),
        "path_switches": sum(1 for a, b, _ in path_calls if a != b),
        "path_modules": list(dict.fromkeys(m for _, m, _ in path_calls)),
        "modules": sorted({m for _, m, _ in calls}),
        "by_module": Counter(m for _, m, _ in calls).most_common(),
        "route": route,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", nargs="?", default=str(ROOT / "fixtures/scenarios/sglang-mamba-bound.log"))
    ap.add_argument("--rule", default="mamba_bound")
    ap.add_argument("--route", action="store_true", help="also print the modules in call order")
    a = ap.parse_args(argv)
    r = measure(a.log, a.rule)
    print(
        f"{r['file']} line {r['line']} turns {r['rule']} on: {r['calls']} calls of {r['functions']} functions, {r['module_switches']} module switches"
    )
    print(
        f"the line's path up to the recommendations: {r['path_calls']} calls, {r['path_switches']} module switches, "
        f"{len(r['path_modules'])} modules: {' '.join(r['path_modules'])}"
    )
    print("calls by module: " + ", ".join(f"{m} {n}" for m, n in r["by_module"]))
    if a.route:
        print("route: " + " > ".join(r["route"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
