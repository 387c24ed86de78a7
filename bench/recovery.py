#!/usr/bin/env python3
"""The cost of reading the current boot back at start, on a large log (docs/reliability.md).

    python bench/recovery.py --gb 2 [--log /tmp/big.log]

Builds (once; ``--log`` keeps it) an SGLang log of about ``--gb`` GB whose only boot is at its
start (the worst case of the backwards scan: every byte searched): bench/gen.py's log, then its
runtime lines again and again. Starts ``serve --log`` on it without flags, as a sidecar restarted
on a long-running server is, and prints the time from the start of the process to the first
scrape, the read-back's own figures (from the exporter's log line), the facts it restored and the
RSS. The page cache is as the machine has it (the file was just written: warm).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import test_serve_support as h  # noqa: E402


def build(path: Path, gb: float) -> None:
    base = path.with_suffix(".base.log")
    subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gen.py"), "--engine", "sglang", "--lines", "500000", "--out", str(base), "--no-truth"],
        check=True,
    )
    data = base.read_bytes()
    base.unlink()
    i = data.find(b"Decode batch")
    body = data[data.rfind(b"\n", 0, i) + 1 :]
    with open(path, "wb") as f:
        f.write(data)
        while f.tell() < gb * 1e9:
            f.write(body)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--log", help="the log to use (built there if missing)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        log = Path(a.log) if a.log else Path(d) / "big.log"
        if not log.exists():
            build(log, a.gb)
        t0 = time.monotonic()
        srv = h.Serve(Path(d), "--log", str(log))
        try:
            srv.wait_up(120)
            text = srv.metrics()
            first = time.monotonic() - t0
            m = re.search(r"read back (\d+) lines .*?searched (\d+) bytes; ([0-9.]+)s", srv.stderr())
            out = {
                "file_bytes": log.stat().st_size,
                "first_scrape_s": round(first, 2),
                "read_back_s": float(m[3]) if m else None,
                "searched_bytes": int(m[2]) if m else None,
                "lines_read_back": int(m[1]) if m else None,
                "lines_counted": h.value(text, h.LINES),
                "mamba_capacity_slots": h.value(text, "hybrid_cache_mamba_capacity_slots"),
                "rss_mib": round(h.value(text, "process_resident_memory_bytes") / 2**20),
            }
        finally:
            srv.stop()
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
