#!/usr/bin/env python3
"""Append a recorded server log to a file at a steady pace, as a live server would write it
(the GPU-less demo's "server": deploy/demo/docker-compose.yml). Standard library only.

    python3 replay.py --src demo.log --dst /logs/server.log [--lines-per-second 20] [--loops 0]

Each loop appends the whole recording again (the exporter sees a server restart, as after a real
one); --loops 0 repeats forever.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--lines-per-second", type=float, default=20.0)
    ap.add_argument("--loops", type=int, default=0, help="0 = forever")
    args = ap.parse_args(argv)
    with open(args.src, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines(keepends=True)
    pause = 1.0 / args.lines_per_second if args.lines_per_second > 0 else 0.0
    loop = 0
    with open(args.dst, "a", encoding="utf-8") as out:
        while args.loops == 0 or loop < args.loops:
            loop += 1
            for line in lines:
                out.write(line if line.endswith("\n") else line + "\n")
                out.flush()
                if pause:
                    time.sleep(pause)
            print(f"replay.py: loop {loop}: appended {len(lines)} lines to {args.dst}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
