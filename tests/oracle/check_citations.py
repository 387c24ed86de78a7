"""Check every ``cite: <path>::<name>`` of the oracle against the released wheels (``make oracle``).

Downloads ``sglang==0.5.23`` and ``vllm==0.33.0`` (no dependencies) with pip into ``--cache`` unless they are
there, then checks that each cited file exists in its wheel and defines each cited name (``def``/``class``/an
assignment). Exit 1 lists the citations that do not resolve. Not part of ``make test`` (it needs the network).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.oracle import SGLANG_RELEASE, VLLM_RELEASE

HERE = Path(__file__).resolve().parent
CITE = re.compile(r"cite:\s*((?:sglang|vllm)/[\w/]+\.py)::([\w.]+(?:\s*\([^)]*\))?)")
ALSO = re.compile(r"(?<![\w/])((?:sglang|vllm)/[\w/]+\.py)::([\w.]+)")


def wheel(cache: Path, name: str, version: str) -> Path:
    found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), f"{name}=={version}"],
            check=True,
        )
        found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    return found[0]


def citations() -> list[tuple[str, str, str]]:
    out = []
    for f in sorted(HERE.glob("*.py")):
        text = f.read_text()
        for m in ALSO.finditer(text):
            out.append((f.name, m.group(1), m.group(2)))
    return sorted(set(out))


def defines(source: str, dotted: str) -> bool:
    pattern = r"^\s*(?:def|class|async def)\s+{0}\b|^\s*{0}\s*[:=]"
    return all(re.search(pattern.format(part), source, re.M) for part in dotted.split("."))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cache", default=".oracle-wheels", help="where the wheels are kept (default .oracle-wheels)")
    a = ap.parse_args(argv)
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    zips = {
        "sglang": zipfile.ZipFile(wheel(cache, "sglang", SGLANG_RELEASE)),
        "vllm": zipfile.ZipFile(wheel(cache, "vllm", VLLM_RELEASE)),
    }
    bad = []
    cites = citations()
    for where, path, name in cites:
        z = zips[path.split("/", 1)[0]]
        try:
            src = z.read(path).decode("utf-8", "replace")
        except KeyError:
            bad.append(f"{where}: {path} is not in the wheel")
            continue
        if not defines(src, name):
            bad.append(f"{where}: {path} defines no {name}")
    for b in bad:
        print(b)
    print(f"{len(cites) - len(bad)} of {len(cites)} citations resolve in sglang {SGLANG_RELEASE} / vllm {VLLM_RELEASE}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
