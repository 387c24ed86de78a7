"""A DP rank that first logs after a server restart belongs to the new boot: its first line is not
taken for another restart (that forgot the release the log proved and cleared ``mamba_capped``
on every rank)."""

from __future__ import annotations

from pathlib import Path

from exporter.app import new_pipeline
from exporter.reading.reader import read_lines

DEMO = Path(__file__).resolve().parents[2] / "fixtures" / "demo" / "sglang-mamba-bound.log"


def test_a_rank_new_after_a_restart_keeps_the_boot_facts() -> None:
    lines = list(read_lines(str(DEMO)))
    pipe = new_pipeline()
    pipe.feed_lines("d", lines)
    pipe.feed_lines("d", lines)  # the same server boots again in the same log
    pipe.finish()
    src = pipe.sources["d"]
    assert src.restarts == 1 and src.servers["0"].findings["mamba_capped"] == 1
    release = str(src.release)
    last = [ln for ln in lines if "Decode batch" in ln][-1]
    pipe.feed_lines("d", [last.replace(" TP0]", " DP1 TP0]").replace("09:22:06", "09:22:16")])
    pipe.finish()
    assert set(src.servers) == {"0", "1"}
    assert src.servers["0"].findings["mamba_capped"] == 1
    assert str(src.release) == release
