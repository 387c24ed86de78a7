"""The generation of what the log said is the state's own (SourceState.generation): the facts are
cached by it and derived again after any line that may change them, whoever feeds and reads the
state, so a reader without the rules never reads stale facts (issue 22, item 1)."""

from __future__ import annotations

from pathlib import Path

from exporter.state.facts import facts_of, peek
from exporter.state.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
BOOT = [
    ln
    for ln in (ROOT / "fixtures/scenarios/sglang-mamba-bound.log").read_text(encoding="utf-8").splitlines()[:40]
    if "batch" not in ln and "INFO:" not in ln
]
DECODE = (
    "[2026-08-14 08:11:{s:02d} TP0] Decode batch, #running-req: 16, #full token: 5208, full token usage: 0.11, "
    "mamba num: 64, mamba usage: 0.80, #queue-req: 4, cuda graph: True, gen throughput (token/s): 812.00"
)
MAMBA_120 = (
    "[2026-08-14 08:10:40 TP0] Mamba Cache is allocated. max_mamba_cache_size: 120, conv_state size: 0.16GB, ssm_state size: 8.55GB "
)


def test_facts_follow_the_log_without_the_rules():
    pipe = Pipeline()  # no observers: nothing but the state's own writer bumps the generation
    assert not pipe.observers
    pipe.feed_lines("s", BOOT)
    src = pipe.sources["s"]
    srv = src.servers["0"]
    f = facts_of(src, srv)
    assert f.mamba_slots == 80
    assert facts_of(src, srv) is f  # kept: nothing changed

    gen = src.generation
    pipe.feed("s", MAMBA_120)  # what the log says changed (the pool printed again: the next boot): the facts again
    assert src.generation > gen and src.restarts == 1
    assert peek(src, srv).mamba_slots == 120  # a reader that writes nothing sees it too
    f = facts_of(src, srv)
    assert f.mamba_slots == 120

    gen = src.generation
    pipe.feed("s", DECODE.format(s=5))
    pipe.feed("s", DECODE.format(s=15))  # closes the bucket of :05: the boot's first sample, with its mamba usage
    # a release feature (SGLang 0.5.3.post3 at least): the facts again, with it, without the rules too
    assert src.generation > gen
    f = facts_of(src, srv)
    assert src.seen_mamba and f.version.at_least("0.5.3.post3")

    gen = src.generation
    for s in (25, 35, 45):  # later samples change no fact: the same generation, the same facts
        pipe.feed("s", DECODE.format(s=s))
    pipe.finish()
    assert src.generation == gen and facts_of(src, srv) is f


def test_a_restart_and_a_detected_engine_are_new_generations():
    pipe = Pipeline()
    src = pipe.source("s")
    g0 = src.generation
    src.detect("sglang")
    assert src.generation == g0 + 1 and src.engine == "sglang"
    src.detect("vllm")  # known already: nothing changes
    assert src.generation == g0 + 1 and src.engine == "sglang"
    src.restart()
    assert src.generation == g0 + 2
