"""The documentation holds together: README is a quickstart, every relative link of the pages and
every section of docs/formats/ a code comment cites exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CITE = re.compile(r"(docs/formats/[\w./-]+\.md)((?:#[\w-]+)?)((?:, #[\w-]+)*)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out = set()
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def _check(target: Path, anchor: str, where: str, bad: list[str]) -> None:
    if not target.exists():
        bad.append(f"{where}: {target.relative_to(ROOT)} does not exist")
    elif anchor and target.suffix == ".md" and anchor not in _anchors(target):
        bad.append(f"{where}: no heading #{anchor} in {target.relative_to(ROOT)}")


def test_readme_is_a_quickstart():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.encode()) <= 12 * 1024, "README.md is a quickstart (<= 12 KB): put the topic in docs/"
    head = text[:400]
    assert "make run" in head and "make test" in head, "the two commands come first"
    for page in ("docs/serve.md", "docs/metrics.md", "docs/architecture.md", "docs/rules.md"):
        assert page in text, f"README.md does not link {page}"


def test_relative_links_resolve():
    bad: list[str] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"```.*?```", "", text, flags=re.S)
        for m in LINK.finditer(text):
            url = m.group(1)
            if re.match(r"[a-z]+:", url):
                continue
            path, _, anchor = url.partition("#")
            target = (page.parent / path).resolve() if path else page
            _check(target, anchor, str(page.relative_to(ROOT)), bad)
    assert not bad, "\n".join(bad)


def test_code_cites_existing_sections():
    """Comments cite sections of docs/formats/ (not reference documents outside the repository)."""
    bad: list[str] = []
    for pkg in ("exporter", "parsers", "dashboards", "tests", "bench"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for m in CITE.finditer(line):
                    anchors = [a.lstrip(", #") for a in [m.group(2), *m.group(3).split(", #")] if a.strip(", #")]
                    for a in anchors or [""]:
                        _check(ROOT / m.group(1), a, f"{path.relative_to(ROOT)}:{n}", bad)
    assert not bad, "\n".join(bad)


def test_the_slug_rule():
    assert _slug(" Mamba pool sizing") == "mamba-pool-sizing"
    assert _slug(" server_args") == "server_args"
    assert _slug(" `serve`: the sidecar") == "serve-the-sidecar"
    assert _slug(" Exporter self-metrics (`serve` only)") == "exporter-self-metrics-serve-only"
