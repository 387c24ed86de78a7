"""What one firing line costs in calls: the Python calls made while the line that turns a finding on
is fed, and how often the call path changes module (docs/architecture.md, "The path of one line").

Feeds a log line by line through the pipeline ``replay`` builds, finds the first line after which
the rule's finding is on (with sampling, the line that closes the sample's 10-s bucket: the
sample, the rules and the recommendations run while it is fed), then feeds the log again up to
that line and counts, with ``sys.setprofile``, every call of a Python function made while it is
fed. A *module switch* is a call whose function lives in another module than its caller's; a
function's module is the one whose namespace it runs in (``__name__`` of its globals), so the
functions a module generates (a dataclass's ``__init__``, the shapes' builders) are that module's.

The *stages* are tests/design/test_layers.py's ``STAGES``: the ground (the catalogues, the
parsers, the capacity model: read by every stage) and the stages a line travels. A *return* is a
call into a stage the path had left for a later one (the ground apart).

    .venv/bin/python bench/calls.py fixtures/scenarios/sglang-mamba-bound.log --rule mamba_bound
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))
sys.path.append(str(ROOT / "tests" / "design"))

from test_layers import STAGES  # noqa: E402

from exporter.app import new_pipeline  # noqa: E402

GROUND = ("exporter.catalogues", "parsers", "exporter.capacity")  # the first of STAGES: read by every stage
FLOW = tuple(s for s in STAGES if s not in GROUND)


def _module(frame) -> str:
    name = frame.f_globals.get("__name__")
    if isinstance(name, str) and name.split(".")[0] in ("exporter", "parsers", "dashboards"):
        return name
    p = Path(frame.f_code.co_filename)
    return p.stem if "prometheus_client" not in str(p) else "prometheus_client"


def stage_of(module: str) -> str | None:
    """The stage of ``module`` (the longest of STAGES it is in), None for one outside them."""
    return max((s for s in STAGES if module == s or module.startswith(s + ".")), key=len, default=None)


def walk(modules: list[str]) -> tuple[list[str], int]:
    """The stages a sequence of callees' modules enters, in order (the ground apart), and its returns: calls into a
    stage the walk had left for a later one."""
    stages: list[str] = []
    returns, reached = 0, -1
    for mod in modules:
        st = stage_of(mod)
        if st is None or st in GROUND:
            continue
        i = FLOW.index(st)
        if i < reached:
            returns += 1
        reached = max(reached, i)
        if not stages or stages[-1] != st:
            stages.append(st)
    return stages, returns


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
            calls.append((_module(back) if back is not None else "", _module(frame), code.co_qualname))

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
    path_stages, path_returns = walk([m for _, m, _ in path_calls])
    all_stages, all_returns = walk([m for _, m, _ in calls])
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
        "path_stages": path_stages,
        "path_returns": path_returns,
        "stages": all_stages,
        "returns": all_returns,
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
    print(
        f"its stages: {' > '.join(s.split('.')[-1] for s in r['path_stages'])} (the ground apart), "
        f"{r['path_returns']} returns to a stage left; the whole line with the recommendations: "
        f"{' > '.join(s.split('.')[-1] for s in r['stages'])}, {r['returns']} returns"
    )
    print("calls by module: " + ", ".join(f"{m} {n}" for m, n in r["by_module"]))
    if a.route:
        print("route: " + " > ".join(r["route"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
