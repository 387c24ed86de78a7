"""``make release-check``: what a new engine release does to the messages the parsers read.

    python -m tests.release.check --engine vllm                      # the newest vLLM on the index against the pinned one
    python -m tests.release.check --engine vllm --version 0.34.0 --base 0.33.0
    python -m tests.release.check --pinned                           # the pinned releases against tests/release/pinned.json
    python -m tests.release.check --update                           # rewrite pinned.json from the pinned wheels

For each engine, the release to check (``--version``, else the newest on the package index) and the base (``--base``,
else the pinned release the README claims: ``messages.PINNED``, whose texts are ``pinned.json``) are downloaded without
dependencies into a cache outside the clone (``--cache``, default ``~/.cache/hybrid-cache-exporter/wheels``) and read
with ``ast`` (nothing of the engine is imported). Every message of the table (``messages.py``) is reported unchanged,
changed (old -> new, verbatim), gone, or new (not in the base: read for this release only); then every logger call
of the new release that the base does not have and whose text mentions the KV cache, mamba, state, concurrency,
max_num_seqs or memory. Exit 1 when a message the parsers read changed or vanished.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.release.messages import PINNED, Message, of
from tests.release.source import DEFAULT_CACHE, Found, Wheel, newest, wheel

HERE = Path(__file__).resolve().parent
PINNED_FILE = HERE / "pinned.json"
ENGINES = ("vllm", "sglang")
KEYWORDS = re.compile(r"kv.?cache|mamba|\bstates?\b|concurrency|max_num_seqs|memory", re.I)


@dataclass
class Seen:
    """A message as one release writes it: the files and the texts (a set: a message may be written in two places)."""

    files: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, found: list[Found]) -> Seen:
        found = sorted(found, key=lambda f: (f.path, f.line))
        return cls(sorted({f.path for f in found}), sorted({f.text for f in found}), [f.line for f in found])


def seen_in(w: Wheel, m: Message) -> Seen:
    """Where ``w`` writes message ``m``: its file of the table first, anywhere else when it moved."""
    hits = w.messages_with(m.anchor, prefer=m.file)
    mine = [f for f in hits if f.path == m.file]
    return Seen.of(mine or hits)


def load_pinned() -> dict:
    return json.loads(PINNED_FILE.read_text(encoding="utf-8")) if PINNED_FILE.exists() else {}


def update(cache: Path) -> int:
    out: dict = {}
    for engine in ENGINES:
        w = wheel(cache, engine, PINNED[engine])
        rows = {}
        for m in of(engine):
            if m.current:
                s = seen_in(w, m)
                rows[m.anchor] = {"files": s.files, "texts": s.texts}
        out[engine] = {"release": PINNED[engine], "messages": rows}
    PINNED_FILE.write_text(json.dumps(out, indent=1, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {PINNED_FILE.relative_to(HERE.parents[1])}: " + ", ".join(f"{e} {PINNED[e]}" for e in ENGINES))
    return 0


def _short(text: str, n: int = 110) -> str:
    t = text.replace("\n", "\\n")
    return t if len(t) <= n else t[: n - 3] + "..."


def check(engine: str, version: str, base: str, cache: Path, out=print) -> int:
    """Report ``engine`` ``base`` -> ``version``; the number of read messages that changed or vanished."""
    new_w = wheel(cache, engine, version)
    pinned = load_pinned().get(engine, {})
    from_table = base == PINNED[engine] and pinned.get("release") == base
    base_w = None if from_table and base == version else wheel(cache, engine, base)
    rows = of(engine)
    current = [m for m in rows if m.current]
    out(f"{engine} {base} -> {version}: {len(current)} messages the parsers read" + (" (base texts: pinned.json)" if from_table else ""))
    counts = {"unchanged": 0, "changed": 0, "gone": 0, "new": 0, "moved": 0}
    failing = 0
    for m in current:
        if from_table:
            row = pinned.get("messages", {}).get(m.anchor, {"files": [], "texts": []})
            old = Seen(row["files"], row["texts"])
        else:
            old = seen_in(base_w, m)  # type: ignore[arg-type]
        new = seen_in(new_w, m)
        where = ", ".join(new.files or old.files)
        if not old.texts:
            if new.texts:
                counts["new"] += 1
                out(f"  new        {_short(new.texts[0])}  [{where}; not in {base}]")
            else:
                counts["gone"] += 1
                failing += 1
                out(f"  gone       {m.anchor!r}: in neither {base} nor {version}  [{m.reads}]")
            continue
        if not new.texts:
            counts["gone"] += 1
            failing += 1
            out(f"  gone       {_short(old.texts[0])}  [{', '.join(old.files)}; read by {m.reads}]")
            continue
        moved = "" if set(new.files) == set(old.files) else f"; moved from {', '.join(old.files)}"
        if moved:
            counts["moved"] += 1
        if new.texts == old.texts:
            counts["unchanged"] += 1
            out(f"  unchanged  {_short(new.texts[0])}  [{where}{moved}]")
            continue
        counts["changed"] += 1
        failing += 1
        out(f"  changed    {m.anchor!r}  [{where}{moved}; read by {m.reads}]")
        for t in old.texts:
            if t not in new.texts:
                out(f"      old: {t!r}")
        for t in new.texts:
            if t not in old.texts:
                out(f"      new: {t!r}")
    hist = [m for m in rows if not m.current]
    out(f"  historical {len(hist)} forms of older releases, read for their logs, not checked: " + "; ".join(repr(m.anchor) for m in hist))
    if base_w is not None and base != version:
        before = {f.text for f in base_w.logger_calls()}
        fresh = [f for f in new_w.logger_calls() if f.text not in before and KEYWORDS.search(f.text)]
        out(f"new logger calls in {version} mentioning the KV cache, mamba, state, concurrency, max_num_seqs or memory ({len(fresh)}):")
        for f in sorted(fresh, key=lambda f: (f.path, f.line)):
            out(f"  {f.path}:{f.line} {f.level} {_short(f.text, 160)!r}")
    out(
        f"{engine} {base} -> {version}: {counts['unchanged']} unchanged, {counts['changed']} changed, {counts['gone']} gone, "
        f"{counts['new']} new ({counts['moved']} moved)" + (f"; {failing} read message(s) changed or vanished" if failing else "")
    )
    return failing


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=(*ENGINES, "all"), default="all")
    ap.add_argument("--version", help="the release to check (default: the newest on the package index)")
    ap.add_argument("--base", help="the release to compare with (default: the pinned one, messages.PINNED)")
    ap.add_argument("--pinned", action="store_true", help="check the pinned releases against pinned.json (what .ci/run does)")
    ap.add_argument("--update", action="store_true", help="rewrite pinned.json from the pinned wheels")
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"where the wheels are kept (default {DEFAULT_CACHE})")
    a = ap.parse_args(argv)
    cache = Path(a.cache)
    if a.update:
        return update(cache)
    if (a.version or a.base) and a.engine == "all":
        ap.error("--version / --base name a release of one engine: give --engine too")
    engines = ENGINES if a.engine == "all" else (a.engine,)
    failing = 0
    for engine in engines:
        if a.pinned:
            version = base = PINNED[engine]
        else:
            version = a.version or newest(engine)
            base = a.base or PINNED[engine]
        failing += check(engine, version, base, cache)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
