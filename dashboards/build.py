"""Generate the dashboard JSON next to its grafanalib source.

python -m dashboards.build           # write dashboards/*.json
python -m dashboards.build --check   # exit 1 if a checked-in JSON is stale
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grafanalib._gen import DashboardEncoder

from . import fleet, hybrid_cache

HERE = Path(__file__).resolve().parent

# output file name -> dashboard factory
DASHBOARDS = {"hybrid-cache.json": hybrid_cache.dashboard, "hybrid-cache-fleet.json": fleet.dashboard}


def render(factory) -> str:
    data = factory().to_json_data()
    return json.dumps(data, cls=DashboardEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="do not write; fail if a JSON file differs from its source")
    ap.add_argument("--out-dir", type=Path, default=HERE)
    args = ap.parse_args(argv)
    stale = []
    for name, factory in DASHBOARDS.items():
        path = args.out_dir / name
        text = render(factory)
        current = path.read_text() if path.exists() else None
        if current == text:
            continue
        if args.check:
            stale.append(name)
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale dashboards (run `python -m dashboards.build`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
