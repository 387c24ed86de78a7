"""serve samples a quiet source on its ingest tick, not in a scrape: the last batch lines of a log
that stopped reach the rules without anyone asking /metrics (and a scrape never runs them)."""

from __future__ import annotations

import time

import exporter.state.pipeline as pipeline_mod
from exporter.serve import ServeConfig, Service

DECODE = (
    "[2026-08-14 08:17:3{s} TP0] Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, mamba num: 16, "
    "mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"
)


def test_quiet_source_is_sampled_by_the_ingest_tick(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(pipeline_mod, "IDLE_SAMPLE_SECONDS", 0.3)
    log = tmp_path / "server.log"
    log.write_text("".join(DECODE.format(s=s) + "\n" for s in "0123"))  # one 10-s bucket: its last line waits
    svc = Service(ServeConfig(listen="127.0.0.1:0", files=[("s", str(log))], from_beginning=True))
    seen: list[str] = []
    svc.pipe.observers.append(lambda src, srv, line, raw: seen.append(raw))
    svc.start()
    try:
        last = DECODE.format(s="3")
        deadline = time.monotonic() + 20
        while last not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        # the bucket's last line, sampled once by the tick (the first line too, which the generic
        # parser read while the source's engine was not known yet)
        assert seen == [last]
        assert svc.pipe.sources["s"].lines["parsed"] == 4
    finally:
        svc.stop()
