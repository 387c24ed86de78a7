"""The recommendations a log leaves on /metrics are those of its facts at its end (exporter/advice/recommend.py).

They are computed when a finding fires and refreshed on samples and on other lines while it is live. An SGLang boot
prints its mamba cap (``mamba_capped`` fires) before its KV pool and the memory left; advice made at the cap line
alone (a larger mamba pool that the later lines show does not fit) stood on /metrics while ``report`` of the same log
said it does not fit. On every fixture: what the server exports is what a fresh computation from its end state gives.
"""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from exporter.advice import recommend
from exporter.app import replay

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted(glob.glob(str(ROOT / "fixtures" / "**" / "*.log"), recursive=True))


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(Path(p).relative_to(ROOT / "fixtures")))
def test_exported_recommendations_are_those_of_the_end_state(path):
    pipe, _ = replay([path], None, None, None)
    for src in pipe.sources.values():
        for srv in src.servers.values():
            live = [r for r, on in srv.findings.items() if on]
            fresh = [r.as_tuple() for r in recommend.for_rules(src, srv, live) if r.rank] if live else []
            assert srv.recommendations == fresh, (src.name, srv.dp_rank)
