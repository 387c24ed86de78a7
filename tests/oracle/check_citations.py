"""Check every ``cite: <path>::<name>`` of the oracle against the released wheels (``make oracle``).

Each oracle module is checked against the wheel of its own release (``vllm_0_34_0.py`` against ``vllm==0.34.0``,
``vllm_0_33_0.py`` against ``vllm==0.33.0``, ``sglang_0_5_23.py`` against ``sglang==0.5.23``; the shared modules and
the defaults table, ``exporter/capacity/defaults.py``, against the newest: :data:`tests.oracle.SGLANG_RELEASE` /
:data:`tests.oracle.VLLM_RELEASE`). A ``same since <release>: <path>::<name>`` line says the engine function is the
same source in both releases, so an oracle step transcribed from the earlier one serves the later one: the check
compares the two definitions. The wheels are downloaded (``pip download --no-deps``) into ``--cache`` unless they are
there: a cache outside the clone (default ``~/.cache/hybrid-cache-exporter/wheels``). Exit 1 lists the citations that
do not resolve. Not part of ``make test`` (it needs the network).
"""

from __future__ import annotations

import argparse
import ast
import re
import zipfile
from pathlib import Path

from tests.oracle import SGLANG_RELEASE, VLLM_RELEASE
from tests.release.source import DEFAULT_CACHE, download

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CITED = (*sorted(HERE.glob("*.py")), ROOT / "exporter" / "defaults.py")
CITE = re.compile(r"cite:\s*((?:sglang|vllm)/[\w/]+\.py)::([\w.]+(?:\s*\([^)]*\))?)")
ALSO = re.compile(r"(?<![\w/])((?:sglang|vllm)/[\w/]+\.py)::([\w.]+)")
SAME = re.compile(r"same since (\d[\w.]*):\s*((?:sglang|vllm)/[\w/]+\.py)::([\w.]+)")
MODULE_RELEASE = re.compile(r"(sglang|vllm)_(\d+)_(\d+)_(\d+)$")


def release_of(path: Path, engine: str) -> str:
    """The release a module's citations of ``engine`` are checked against: its own (by its name), else the newest."""
    m = MODULE_RELEASE.match(path.stem)
    if m and m.group(1) == engine:
        return ".".join(m.group(2, 3, 4))
    return SGLANG_RELEASE if engine == "sglang" else VLLM_RELEASE


def citations() -> list[tuple[str, str, str, str]]:
    """(file, release, path, name) of every citation."""
    out = []
    for f in CITED:
        text = f.read_text()
        for m in ALSO.finditer(text):
            engine = m.group(1).split("/", 1)[0]
            out.append((f.name, release_of(f, engine), m.group(1), m.group(2)))
    return sorted(set(out))


def unchanged() -> list[tuple[str, str, str, str, str]]:
    """(file, earlier release, its own release, path, name) of every ``same since`` line."""
    out = []
    for f in CITED:
        for m in SAME.finditer(f.read_text()):
            engine = m.group(2).split("/", 1)[0]
            out.append((f.name, m.group(1), release_of(f, engine), m.group(2), m.group(3)))
    return sorted(set(out))


def defines(source: str, dotted: str) -> bool:
    pattern = r"^\s*(?:def|class|async def)\s+{0}\b|^\s*{0}\s*[:=]"
    return all(re.search(pattern.format(part), source, re.M) for part in dotted.split("."))


def _defined(n: ast.AST) -> set[str]:
    """The names one statement defines (a def, a class, an assignment)."""
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {n.name}
    if isinstance(n, ast.Assign):
        return {t.id for t in n.targets if isinstance(t, ast.Name)}
    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
        return {n.target.id}
    return set()


def definition(source: str, dotted: str) -> str | None:
    """The source of a top-level or nested ``def``/``class``/assignment ``dotted`` (None: not there)."""
    node: ast.AST = ast.parse(source)
    for part in dotted.split("."):
        found = None
        for n in getattr(node, "body", []):
            if part in _defined(n):
                found = n
        if found is None:
            return None
        node = found
    return ast.get_source_segment(source, node)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"where the wheels are kept (default {DEFAULT_CACHE})")
    a = ap.parse_args(argv)
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    zips: dict[tuple[str, str], zipfile.ZipFile] = {}

    def read(engine: str, release: str, path: str) -> str | None:
        key = (engine, release)
        if key not in zips:
            zips[key] = zipfile.ZipFile(download(cache, engine, release))
        try:
            return zips[key].read(path).decode("utf-8", "replace")
        except KeyError:
            return None

    bad = []
    cites = citations()
    for where, release, path, name in cites:
        src = read(path.split("/", 1)[0], release, path)
        if src is None:
            bad.append(f"{where}: {path} is not in the {release} wheel")
        elif not defines(src, name):
            bad.append(f"{where}: {path} defines no {name} in {release}")
    same = unchanged()
    for where, old, new, path, name in same:
        engine = path.split("/", 1)[0]
        a_src, b_src = read(engine, old, path), read(engine, new, path)
        a_def = definition(a_src, name) if a_src else None
        b_def = definition(b_src, name) if b_src else None
        if a_def is None or b_def is None:
            bad.append(f"{where}: {path}::{name} is not in both the {old} and {new} wheels")
        elif a_def != b_def:
            bad.append(f"{where}: {path}::{name} changed from {old} to {new}")
    for b in bad:
        print(b)
    releases = ", ".join(f"{e} {r}" for e, r in sorted(zips))
    print(
        f"{len(cites) + len(same) - len(bad)} of {len(cites) + len(same)} citations resolve ({releases}); {len(same)} are the same source in both releases"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
