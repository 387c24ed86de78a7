"""The import graph of the project: no cycle, no deferred import that hides one, the face on top.

Read with ``ast`` from the source (nothing is imported), so a cycle fails here even when the
order the modules happen to load in would hide it. Rules (docs/architecture.md):

* no cycle among the modules of ``exporter``, ``parsers`` and ``dashboards`` (module-level
  imports, including the implicit import of a package's ``__init__``);
* no import inside a function that closes a cycle with the other imports, deferred or not
  (a deferred import is allowed for start-up time, never to dodge a cycle);
* nothing imports the face (``exporter.cli``) but the face and ``exporter.__main__``; the
  composition root (``exporter.app``, ``exporter.serve``) is imported only by the face;
* the stages (``STAGES``, in the order a line travels) import only themselves and the stages before
  them: no import, at the top or in a function, runs from a stage to a later one; every module of
  ``exporter`` is in a stage package or one of the few at its top (``TOP``).

One import is made by name at run time, for start-up time: the face loads a subcommand's module
(``exporter/cli/<name>.py``) only when that subcommand is chosen, from its ``COMMANDS`` table
(``replay`` then does not load ``serve``'s web server and TLS, ``report``'s renderers or
``plan``'s tables: ~12 ms of each replay; ``--version`` 187 -> 36 ms). The graph reads that table
as module-level imports of ``exporter.cli``, so the cycle checks see them; no other module
imports by name, and the face defers nothing else (a subcommand's module has its imports at the
top: it is loaded whole when chosen).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("exporter", "parsers", "dashboards")
FACE = "exporter.cli"
ROOT_MODULES = ("exporter.app", "exporter.serve")

# The stages, from the ground up (docs/architecture.md, "The stages"): a module of a stage may import
# its own stage and the ones before it, never a later one. The catalogues are the ground (the parsers
# read the metric contract's label bounds); the capacity model carries the engines' releases and
# defaults, which the parsers do not need; the sources drive the state stage's pipeline, so they
# stand after it.
STAGES = (
    "exporter.catalogues",
    "parsers",
    "exporter.capacity",
    "exporter.reading",
    "exporter.state",
    "exporter.sources",
    "exporter.diagnosis",
    "exporter.advice",
    "exporter.exposition",
    "exporter.presentation",
)
# exporter's top: the package (its version), the composition root, the face, logging set-up
TOP = ("exporter", "exporter.__main__", "exporter.app", "exporter.serve", "exporter.logsetup")

# Deferred imports that close a cycle and that another item of issue 12 removes. A pair here must
# still exist (the test fails when it is gone: delete its line then), and no new pair may appear.
KNOWN_DEFERRED: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = list(rel.parts)
            if "tests" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _subcommands() -> list[str]:
    """The keys of ``COMMANDS`` in exporter/cli/__init__.py, read with ``ast``."""
    tree = ast.parse(MODULES[FACE].read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "COMMANDS":
            return [ast.literal_eval(k) for k in node.value.keys]
    raise AssertionError("no COMMANDS table in exporter/cli/__init__.py")


def _is_package(mod: str) -> bool:
    return MODULES[mod].name == "__init__.py"


def _resolve(mod: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """Project modules an import statement in ``mod`` loads (with their parent packages)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            base = mod.split(".") if _is_package(mod) else mod.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [target]
        # ``from pkg import sub`` loads the submodule too
        names += [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    out = []
    own = mod.split(".")
    for name in names:
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            # a package that contains the importer is already loading: not an edge
            if prefix in MODULES and own[:i] != parts[:i]:
                out.append(prefix)
    return out


@functools.cache
def _tree(mod: str) -> ast.Module:
    """A module's syntax tree, parsed once for every test here (read it, do not change it)."""
    path = MODULES[mod]
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def _graph() -> tuple[dict[str, set[str]], list[tuple[str, str, int]]]:
    """Module-level import edges, and the deferred (function-level) ones as (module, target, line);
    made once (the tests read it, none changes it)."""
    top: dict[str, set[str]] = {m: set() for m in MODULES}
    deferred: list[tuple[str, str, int]] = []
    for mod in MODULES:
        tree = _tree(mod)

        def walk(node: ast.AST, in_function: bool, mod: str = mod) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _resolve(mod, child):
                        if target == mod:
                            continue
                        if in_function:
                            deferred.append((mod, target, child.lineno))
                        else:
                            top[mod].add(target)
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                walk(child, inner)

        walk(tree, False)
    # the face imports each subcommand's module by name (importlib), when chosen
    top[FACE] |= {f"{FACE}.{name}" for name in _subcommands()}
    return top, deferred


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    """A path start -> ... -> goal in ``graph``, or None."""
    stack = [(start, [start])]
    seen = {start}
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == goal:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def test_the_graph_is_read():
    top, _ = _graph()
    assert "exporter.state.pipeline" in top["exporter.exposition.collector"]
    assert "exporter.sources" in top["exporter.serve"] and "exporter.sources.tailer" in top["exporter.sources"]
    assert "parsers" in top["exporter.state.sampler"] and "parsers.events" in top["exporter.state.wrapped"]


def test_no_import_cycle():
    top, _ = _graph()
    cycles = []
    for mod in sorted(top):
        for nxt in sorted(top[mod]):
            back = _reaches(top, nxt, mod)
            if back:
                cycles.append(" -> ".join([mod, *back]))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_deferred_import_hides_a_cycle():
    top, deferred = _graph()
    every = {m: set(ts) for m, ts in top.items()}
    for mod, target, _ in deferred:
        every[mod].add(target)
    hidden = {}
    for mod, target, line in deferred:
        path = _reaches(every, target, mod)
        if path:
            hidden[(mod, target)] = (
                f"{MODULES[mod].relative_to(ROOT)}:{line} imports {target} in a function; at the top it would close {' -> '.join([mod, *path])}"
            )
    new = {k: v for k, v in hidden.items() if k not in KNOWN_DEFERRED}
    gone = sorted(set(KNOWN_DEFERRED) - set(hidden))
    assert not new, "deferred imports that dodge a cycle:\n" + "\n".join(new.values())
    assert not gone, f"these cycles are gone: delete them from KNOWN_DEFERRED in {Path(__file__).name}: {gone}"


def test_subcommands_load_by_name_only_from_the_table():
    """The face's ``COMMANDS`` names exactly its subcommand modules (``common`` is shared code), each
    has ``register``; the one ``import_module`` / ``__import__`` call of the project is the face's,
    of a module of that table; no import in a function of the face."""
    subs = {m.rsplit(".", 1)[1] for m in MODULES if m.startswith(FACE + ".")} - {"common"}
    assert set(_subcommands()) == subs, f"COMMANDS {sorted(_subcommands())} != modules {sorted(subs)}"
    for name in subs:
        tree = _tree(f"{FACE}.{name}")
        assert any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in tree.body), f"{FACE}.{name} has no register()"
    by_name = []  # (module, line) of each call of import_module / __import__
    for mod in MODULES:
        for node in ast.walk(_tree(mod)):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
                if name in ("import_module", "__import__"):
                    by_name.append((mod, node.lineno))
    assert len(by_name) == 1 and by_name[0][0] == FACE, f"imports by name: {by_name} (only the face's COMMANDS table may)"
    assert 'importlib.import_module(f"{__name__}.{name}")' in MODULES[FACE].read_text(encoding="utf-8")
    _, deferred = _graph()
    in_face = [d for d in deferred if d[0].startswith(FACE)]
    assert not in_face, f"the face defers imports (put them at the top of the subcommand's module): {in_face}"


def test_the_face_is_on_top():
    top, deferred = _graph()
    edges = [(m, t) for m, ts in top.items() for t in ts] + [(m, t) for m, t, _ in deferred]
    below = [(m, t) for m, t in edges if t.startswith(FACE) and not m.startswith(FACE) and m != "exporter.__main__"]
    assert not below, f"modules below the face import it: {below}"
    wiring = [(m, t) for m, t in edges if t in ROOT_MODULES and not m.startswith(FACE) and m not in ROOT_MODULES]
    assert not wiring, f"only the face imports the composition root: {wiring}"


def test_the_face_parses_and_prints_only():
    """The face builds nothing itself: no pipeline, collector, registry, tailer or server class is
    named in it (those are made by the composition root)."""
    built = (
        "Pipeline(",
        "Rules(",
        "History(",
        "HybridCacheCollector(",
        "CollectorRegistry(",
        "Manager(",
        "StdinSource(",
        "make_server(",
        "attach(",
    )
    for mod, path in MODULES.items():
        if mod.startswith(FACE):
            text = path.read_text(encoding="utf-8")
            assert not [b for b in built if b in text], f"{path.relative_to(ROOT)} wires components itself"


def _stage(mod: str) -> int | None:
    for i, stage in enumerate(STAGES):
        if mod == stage or mod.startswith(stage + "."):
            return i
    return None


def test_every_module_has_its_stage():
    """exporter/ holds stage packages, the face and a few modules at its top; each stage package
    says in its docstring what it holds."""
    loose = [m for m in MODULES if m.startswith("exporter") and _stage(m) is None and m not in TOP and not m.startswith(FACE)]
    assert not loose, f"modules in no stage (put each in the stage its imports allow): {loose}"
    top_files = sorted(p.name for p in (ROOT / "exporter").glob("*.py"))
    assert len(top_files) <= 8, f"exporter/ holds {len(top_files)} modules at its top: {top_files}"
    for stage in STAGES:
        if stage.startswith("exporter."):
            doc = ast.get_docstring(_tree(stage))
            assert doc and len(doc) > 80, f"{MODULES[stage].relative_to(ROOT)} does not say what the stage holds"


def test_no_import_runs_against_the_stages():
    """No import (at the top or deferred) from a stage to a later one, nor from a stage to exporter's
    top (the composition root, the face)."""
    top, deferred = _graph()
    edges = [(m, t) for m, ts in top.items() for t in ts] + [(m, t) for m, t, _ in deferred]
    against = []
    for mod, target in edges:
        here = _stage(mod)
        if here is None:
            continue  # the top, the face, dashboards: they may read any stage
        there = _stage(target)
        if there is None and target != "exporter":
            against.append(f"{mod} -> {target} (a stage imports exporter's top)")
        elif there is not None and there > here:
            against.append(f"{mod} ({STAGES[here]}) -> {target} ({STAGES[there]})")
    assert not against, "imports against the order of the stages:\n" + "\n".join(sorted(against))
    # the order is the tightest the imports allow: each stage imports the one just before it
    # where the flow passes (so the list is not merely permissive)
    reached = {(_stage(m), _stage(t)) for m, t in edges if _stage(m) is not None and _stage(t) is not None}
    for a, b in (
        ("parsers", "exporter.catalogues"),
        ("exporter.state", "exporter.reading"),
        ("exporter.state", "exporter.capacity"),
        ("exporter.sources", "exporter.state"),
        ("exporter.diagnosis", "exporter.state"),
        ("exporter.advice", "exporter.diagnosis"),
        ("exporter.presentation", "exporter.advice"),
        ("exporter.exposition", "exporter.state"),
    ):
        assert (STAGES.index(a), STAGES.index(b)) in reached, f"{a} no longer imports {b}: redraw the stages"


def test_the_contract_is_a_leaf():
    """exporter/catalogues/contract.py imports nothing of the project: every layer may read it."""
    top, deferred = _graph()
    assert top["exporter.catalogues.contract"] <= {"exporter"} and not [d for d in deferred if d[0] == "exporter.catalogues.contract"]


def test_only_the_face_parses_arguments():
    """argparse is the face's: below it, functions take plain values (docs/architecture.md rule 2)."""
    users = []
    for mod in MODULES:
        if mod.startswith(FACE) or mod.startswith("dashboards"):  # dashboards/build.py is a script of its own
            continue
        for node in ast.walk(_tree(mod)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if "argparse" in names or (isinstance(node, ast.ImportFrom) and node.module == "argparse"):
                users.append(mod)
    assert not users, f"argparse below the face: {sorted(set(users))}"
