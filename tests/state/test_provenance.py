"""Every fact on /metrics proven by a line of one boot and one rank (issue 29, items 3, 4, 6 and 8).

* the ledger's rules (exporter/state/provenance.py), as a reference table: which key a message gets,
  when it is the next boot, when it is the same line again or a declared revision;
* one pool per rank: two-digit TP ranks interleaved, a sliding-window pool per rank;
* one boot per message: a sweep's pasted summary, two boots with only a comment between them;
* a vLLM SpecDecoding line is its engine's;
* on every fixture that has a golden: each fact the exposition shows has a proof, the proof's line
  (read back from the file as replay read it) says the value, of the boot and rank the proof names.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import exposition, replay
from exporter.catalogues import contract
from exporter.presentation.explain import proofs
from exporter.reading.reader import Reader, read_blocks
from exporter.state.pipeline import Pipeline
from exporter.state.provenance import REVISIONS, SUMMED_POOLS, Basis, Ledger
from parsers import events as ev
from parsers import parse_line

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "collector"))
from test_golden import fixtures  # noqa: E402

GIB = float(1 << 30)


def kv(tokens: int, k: float, label: str | None = None, upper: bool = False, draft: bool = False) -> ev.KVCacheAllocated:
    return ev.KVCacheAllocated(tokens, k_bytes=k * GIB, v_bytes=k * GIB, label=label, upper_bound=upper, draft=draft)


def feed(lines: list[str], engine: str | None = None) -> Pipeline:
    pipe = Pipeline(engine)
    pipe.feed_lines("s", lines)
    pipe.finish()
    return pipe


def series(pipe: Pipeline) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(exposition(pipe).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("engine", "source"))))] = s.value
    return out


def value(pipe: Pipeline, name: str, **labels: str) -> float | None:
    return series(pipe).get((contract.PREFIX + name, tuple(sorted({"dp_rank": "0", **labels}.items()))))


# --------------------------------------------------------------------------------------------
# the ledger: a reference table of its decisions

R0, R1 = ("0", 0, 0), ("0", 1, 0)


@pytest.mark.parametrize(
    "said, rank, event, spec, want_key, want_next",
    [
        # the first pool of a rank is the target's; the same line of another rank is its own
        ([], R0, kv(1000, 1.0), False, ("kv", "main"), False),
        ([(R0, kv(1000, 1.0))], R1, kv(1000, 1.0), False, ("kv", "main"), False),
        # the same line again from the same rank: the same pool, not the next boot
        ([(R0, kv(1000, 1.0))], R0, kv(1000, 1.0), False, ("kv", "main"), False),
        # a second pool with the target's #tokens: the draft model's (SGLang's draft shares the indices)
        ([(R0, kv(1000, 1.0))], R0, kv(1000, 0.1), False, ("kv", "draft"), False),
        # ... or any second pool when speculative decoding is on
        ([(R0, kv(1000, 1.0))], R0, kv(900, 0.1), True, ("kv", "draft"), False),
        # the sliding-window pool, once the rank announced one
        ([(R0, ev.SWAPool(800, 1000)), (R0, kv(1000, 1.0))], R0, kv(800, 0.8), False, ("kv", "swa"), False),
        # a second pool with other #tokens, nothing announced: the target's pool again, another value: the next boot
        ([(R0, kv(1000, 1.0))], R0, kv(1200, 1.2), False, ("kv", "main"), True),
        # target and draft said: a third pool is the next boot's target
        ([(R0, kv(1000, 1.0)), (R0, kv(1000, 0.1))], R0, kv(1100, 1.1), False, ("kv", "main"), True),
        ([(R0, kv(1000, 1.0)), (R0, kv(1000, 0.1))], R0, kv(1000, 0.1), False, ("kv", "draft"), False),
        # a revision (rule 4): the settled size after a 'VA upper bound' line
        ([(R0, kv(1500, 1.5, upper=True))], R0, kv(1000, 1.0), False, ("kv", "settled"), False),
        ([(R0, kv(1500, 1.5, upper=True)), (R0, kv(1000, 1.0))], R0, kv(1000, 1.0), False, ("kv", "settled"), False),
        # a labelled pool is its label; the post-capture draft line is the draft pool
        (
            [(R0, kv(1000, 1.0))],
            R0,
            kv(1000, 0.3, label="MiniMax MSA-v1 main NVFP4"),
            False,
            ("kv", "label", "MiniMax MSA-v1 main NVFP4"),
            False,
        ),
        ([(R0, kv(1000, 1.0))], R0, kv(1000, 0.1, draft=True), False, ("kv", "draft"), False),
        # other messages: the same one again with another value is the next boot
        ([(R0, ev.MambaCacheAllocated(80, 1.0, 2.0))], R0, ev.MambaCacheAllocated(80, 1.0, 2.0), False, ("mamba",), False),
        ([(R0, ev.MambaCacheAllocated(80, 1.0, 2.0))], R0, ev.MambaCacheAllocated(96, 1.2, 2.4), False, ("mamba",), True),
        ([(R0, ev.MambaCacheAllocated(80, 1.0, 2.0))], R1, ev.MambaCacheAllocated(96, 1.2, 2.4), False, ("mamba",), False),
        (
            [(R0, ev.SchedulerSummary({"max_total_num_tokens": 10}))],
            R0,
            ev.SchedulerSummary({"max_total_num_tokens": 11}),
            False,
            ("summary",),
            True,
        ),
        # vLLM: one type, several messages; a per-worker message is no boot's once-per-rank message
        (
            [(R0, ev.KVCapacity(tokens=5000))],
            R0,
            ev.KVCapacity(max_model_len=4096, max_concurrency=1.5),
            False,
            ("kv_capacity", False, True, False),
            False,
        ),
        ([(R0, ev.KVCapacity(tokens=5000))], R0, ev.KVCapacity(tokens=6000), False, ("kv_capacity", True, False, False), True),
        ([(R0, ev.KVMemory(1.0))], R0, ev.KVMemory(2.0), False, None, False),
        ([(R0, ev.WeightsLoaded(1.0))], R0, ev.WeightsLoaded(2.0), False, None, False),
    ],
)
def test_the_ledger_decides_keys_and_boots(said, rank, event, spec, want_key, want_next) -> None:
    led = Ledger()
    for n, (r, e) in enumerate(said, 1):
        key, nxt = led.hear(r, e, n, spec)
        assert not nxt, "a setup line was taken for the next boot"
    key, nxt = led.hear(rank, event, len(said) + 1, spec)
    assert (key, nxt) == (want_key, want_next)


def test_a_message_read_again_whole_is_the_same_line() -> None:
    # a wrapped message that parsed on its first piece is applied again, joined: its first line is the same
    led = Ledger()
    led.hear(R0, ev.SchedulerSummary({"max_total_num_tokens": 10}), 7, False)
    assert led.hear(R0, ev.SchedulerSummary({"max_total_num_tokens": 10, "context_len": 4}), 7, False) == (("summary",), False)
    assert led.said[R0][("summary",)] == (ev.SchedulerSummary({"max_total_num_tokens": 10, "context_len": 4}), 7)


def test_revisions_name_messages_the_ledger_gives() -> None:
    # every declared revision settles a message the ledger keys, and is keyed itself
    assert REVISIONS
    for revising, revised in REVISIONS.items():
        assert revising[0] == revised[0] and revising != revised


def test_confirmations_count_the_same_line_of_other_ranks_of_the_group() -> None:
    led = Ledger()
    for r in (R0, R1, ("0", 2, 0), ("1", 0, 0)):
        led.hear(r, kv(1000, 1.0), 1, False)
    led.hear(("0", 3, 0), kv(1000, 2.0), 2, False)  # another pool: no confirmation
    assert led.confirmations(R0, ("kv", "main")) == 2


# --------------------------------------------------------------------------------------------
# item 3: one pool per rank

TAGS = [10, 4, 13, 0, 8, 1, 12, 5, 9, 2, 14, 6, 11, 3, 15, 7]


def test_two_digit_tp_ranks_interleaved_give_one_ranks_pool() -> None:
    pipe = replay([str(ROOT / "fixtures/sglang/tp16-interleaved.log")], None, None, None)[0]
    src = pipe.sources["tp16-interleaved"]
    assert value(pipe, "kv_capacity_bytes") == pytest.approx(2 * 5.81 * GIB)  # one rank's K + V, as each rank prints it
    assert value(pipe, "swa_capacity_tokens") is None  # no second pool was invented
    assert value(pipe, "kv_capacity_tokens") == 812544
    assert src.restarts == 0 and src.servers["0"].speaker == (0, 0)
    p = src.servers["0"].proofs["kv_capacity_bytes"]
    assert p.basis is Basis.LOGGED and p.rank == ("0", 0, None)
    assert src.ledger.confirmations(("0", 0, 0), p.message) == 15


def test_a_sliding_window_pool_per_rank_is_added_to_that_ranks_pool_only() -> None:
    boot = ["[2026-01-05 10:00:00] server_args=ServerArgs(model_path='openai/gpt-oss-120b', tp_size=16, speculative_algorithm=None)"]
    for r in TAGS:  # each rank: announce, full pool, sliding-window pool, in rank order interleaved
        boot += [
            f"[2026-01-05 10:00:10 TP{r}] Use sliding window memory pool. full_layer_tokens=2000000, swa_layer_tokens=1600000",
            f"[2026-01-05 10:00:11 TP{r}] KV Cache is allocated. #tokens: 2000000, K size: 1.50 GB, V size: 1.50 GB",
            f"[2026-01-05 10:00:11 TP{r}] KV Cache is allocated. #tokens: 1600000, K size: 1.20 GB, V size: 1.20 GB",
        ]
    pipe = feed(boot)
    assert value(pipe, "kv_capacity_bytes") == pytest.approx((3.0 + 2.4) * GIB)
    assert value(pipe, "kv_capacity_tokens") == 2000000
    assert value(pipe, "swa_capacity_tokens") == 1600000
    assert pipe.sources["s"].restarts == 0
    p = pipe.sources["s"].servers["0"].proofs["kv_capacity_bytes"]
    assert p.basis is Basis.DERIVED and p.rule == SUMMED_POOLS and len(p.also) == 1


# --------------------------------------------------------------------------------------------
# item 4: one boot per message


def test_a_sweeps_pasted_summary_is_five_boots_of_target_and_draft() -> None:
    path = ROOT / "fixtures/formats/sweep-summary.log"
    lines = path.read_text(encoding="utf-8").splitlines()
    pools = [ln for ln in lines if "KV Cache is allocated" in ln]
    assert len(pools) == 10
    last_target, last_draft = (parse_line(ln.strip(), None, 2026).event for ln in pools[-2:])
    pipe = replay([str(path)], None, None, None)[0]
    src = pipe.sources["sweep-summary"]
    assert src.restarts == 4  # five boots
    assert value(pipe, "kv_capacity_tokens") == last_target.tokens
    assert value(pipe, "kv_capacity_bytes") == pytest.approx(last_target.total_bytes)  # never a sum of boots
    assert value(pipe, "draft_kv_capacity_tokens") == last_draft.tokens
    assert value(pipe, "swa_capacity_tokens") is None  # never a sliding-window pool from a draft pool
    p = src.servers["0"].proofs["draft_kv_capacity_tokens"]
    assert p.boot == 5 and src.where(p.line) == ("sweep-summary.log", lines.index(pools[-1]) + 1)


def test_two_boots_with_a_comment_between_never_combine() -> None:
    path = ROOT / "fixtures/sglang/two-boots-comment.log"
    lines = path.read_text(encoding="utf-8").splitlines()
    second = [parse_line(ln, "sglang", 2026).event for ln in lines[lines.index(next(x for x in lines if x.startswith("#"))) :]]
    kv2 = next(e for e in second if isinstance(e, ev.KVCacheAllocated))
    mamba2 = next(e for e in second if isinstance(e, ev.MambaCacheAllocated))
    pipe = replay([str(path)], None, None, None)[0]
    assert pipe.sources["two-boots-comment"].restarts == 1
    assert value(pipe, "kv_capacity_tokens") == kv2.tokens
    assert value(pipe, "kv_capacity_bytes") == pytest.approx(kv2.total_bytes)  # the second boot's bytes beside its tokens
    assert value(pipe, "mamba_capacity_slots") == mamba2.slots
    assert value(pipe, "swa_capacity_tokens") is None
    for name, p in pipe.sources["two-boots-comment"].servers["0"].proofs.items():
        assert p.boot == 2, name


def test_the_same_value_again_is_no_boot_and_a_revision_is_no_boot() -> None:
    lines = [
        "[2026-09-13 15:51:41] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 151221, K size: 1.15 GB, V size: 1.15 GB",
        "[2026-09-13 15:51:41] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 151221, K size: 1.15 GB, V size: 1.15 GB",
        "[2026-09-13 15:51:47] Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 98304, KV size: 1.50 GB, avail mem=0.05 GB",
        "[2026-09-13 15:51:48] Post-capture KV sizing: draft KV cache allocated. dtype: torch.bfloat16, #tokens: 98304, KV size: 0.10 GB",
    ]
    pipe = feed(lines)
    src = pipe.sources["s"]
    assert src.restarts == 0
    assert value(pipe, "kv_capacity_tokens") == 98304 and value(pipe, "kv_capacity_bytes") == pytest.approx(1.5 * GIB)
    assert value(pipe, "draft_kv_capacity_tokens") == 98304
    assert src.servers["0"].proofs["kv_capacity_tokens"].line == 3


# --------------------------------------------------------------------------------------------
# item 6: SpecDecoding lines are their engine's


def test_spec_decoding_lines_follow_their_engines_stats_line() -> None:
    path = ROOT / "fixtures/vllm/dp2-spec.log"
    pipe = replay([str(path)], None, None, None)[0]
    want: dict[str, list[ev.SpecDecoding]] = {"0": [], "1": []}
    engine = None
    for ln in path.read_text(encoding="utf-8").splitlines():
        e = parse_line(ln, "vllm", 2026).event
        if isinstance(e, ev.BatchStats) and e.engine_index is not None:
            engine = str(e.engine_index)
        elif isinstance(e, ev.SpecDecoding):
            want[engine].append(e)  # type: ignore[index]
    for dp, specs in want.items():
        assert len(specs) == 2
        assert value(pipe, "spec_accepted_tokens_total", dp_rank=dp) == sum(s.accepted_tokens for s in specs)
        assert value(pipe, "spec_drafted_tokens_total", dp_rank=dp) == sum(s.drafted_tokens for s in specs)
        assert value(pipe, "spec_accept_length", dp_rank=dp) == specs[-1].mean_accept_length


def test_a_spec_decoding_line_without_an_engine_before_it_is_rank_0s() -> None:
    lines = [
        "INFO 06-12 09:03:31 [loggers.py:118] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
        "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.2%, Prefix cache hit rate: 0.0%",
        "INFO 06-12 09:03:31 [metrics.py:86] SpecDecoding metrics: Draft acceptance rate: 38.2%, Mean acceptance length: 2.53, "
        "Accepted: 3342 tokens, Drafted: 8748 tokens, Per-position acceptance rate: 0.612, 0.401",
    ]
    pipe = feed(lines, "vllm")
    assert value(pipe, "spec_accepted_tokens_total") == 3342


# --------------------------------------------------------------------------------------------
# item 8: every fact proven, on every fixture

# the families whose series are facts of the log (a proof each); the runtime gauges and counters are
# kept by the hot path without their lines and carry their basis only
FACTS = {m.name for m in (*contract.CAPACITY, contract.MAX_RUNNING, contract.MAMBA_STATE_BYTES, contract.REPLAYSSM_BUFFER_BYTES)}


def _said(e: object) -> list[object]:
    """Every value an event carries: its fields, the values of its maps, the entries and length of its lists."""
    out: list[object] = []
    todo = [e]
    while todo:
        x = todo.pop()
        if is_dataclass(x):
            todo += [getattr(x, f.name) for f in fields(x)]
            if isinstance(x, ev.KVCacheAllocated):
                out.append(x.total_bytes)
        elif isinstance(x, dict):
            todo += list(x.values())
        elif isinstance(x, (list, tuple)):
            out.append(len(x))
            todo += list(x)
        elif x is not None:
            out.append(x)
    return out


def _says(e: object, v: object) -> bool:
    for x in _said(e):
        if isinstance(v, (int, float)) and not isinstance(v, bool) and isinstance(x, (int, float)) and not isinstance(x, bool):
            if abs(float(x) - float(v)) <= 1e-9 * max(1.0, abs(float(v))):
                return True
        elif x == v or str(x) == str(v):
            return True
    return False


def _lines(path: Path) -> list[str]:
    """The lines of a file as replay reads them (Docker and CRI records unwrapped)."""
    out: list[str] = []
    for text in read_blocks(str(path), Reader()):
        out += text[:-1].split("\n")
    return out


def _event(src, lines: list[str], r: dict) -> object:
    text = "".join(lines[r["line"] - 1 : r["line"] - 1 + r["lines"]])
    parsed = parse_line(text, src.engine, src.year)
    return parsed.event


LOGS = fixtures()


@pytest.fixture(scope="module")
def replayed() -> dict[Path, Pipeline]:
    return {p: replay([str(p)], None, None, None)[0] for p in LOGS}


@pytest.mark.parametrize("log", LOGS, ids=[f"{p.parent.name}/{p.name}" for p in LOGS])
def test_every_fact_has_a_line_of_its_boot_and_rank_that_says_it(log: Path, replayed: dict[Path, Pipeline]) -> None:
    pipe = replayed[log]
    (src,) = pipe.sources.values()
    lines = _lines(log)
    exported = {(name, labels) for (name, labels) in series(pipe) if name in FACTS}  # every fact series on /metrics ...
    listed = set()
    for srv in src.servers.values():
        for r in proofs(src, srv):
            if r["metric"] not in FACTS:
                continue
            listed.add((r["metric"], tuple(sorted(r["labels"].items()))))
            what = f"{r['metric']}{r['labels']} = {r['value']}"
            assert r["basis"] in set(Basis), what
            assert r["boot"] == src.restarts + 1, f"{what}: a fact of boot {r['boot']} in boot {src.restarts + 1}"
            assert r["dp_rank"] == srv.dp_rank, what
            if r["basis"] == Basis.DEFAULT:
                assert r["line"] is None and r["rule"], what
                continue
            assert r["file"] == log.name and 1 <= r["line"] <= len(lines), what
            e = _event(src, lines, r)
            if r["basis"] == Basis.DERIVED:
                assert r["rule"], what
                if r["rule"] == SUMMED_POOLS:  # the pools of one rank: the line and the others it names, added
                    parts = [e] + [parse_line(lines[a["line"] - 1], src.engine, src.year).event for a in r["also"]]
                    assert sum(p.total_bytes for p in parts) == pytest.approx(r["value"]), what
                continue
            assert e is not None and _says(e, r["value"]), f"{what}: line {r['line']} does not say it: {e}"
            if r["tp_rank"] is not None and srv.speaker is not None:  # the speaking rank's line (rule 2)
                assert (r["pp_rank"] or 0, r["tp_rank"]) == srv.speaker, what
    assert exported == listed  # ... is listed with its proof, and nothing else is
    for r in proofs(src):  # the configuration on hybrid_cache_server_info
        what = f"{r['labels']} = {r['value']}"
        assert r["basis"] in set(Basis) and r["boot"] == src.restarts + 1, what
        if r["basis"] == Basis.LOGGED:
            e = _event(src, lines, r)
            assert e is not None and _says(e, r["value"] if r["metric"] != contract.GDN_PREFILL_KERNEL.name else r["labels"]["kernel"]), (
                what
            )


def test_explain_and_report_list_the_facts_with_their_lines(tmp_path: Path) -> None:
    log = ROOT / "fixtures/sglang/tp16-interleaved.log"
    exe = [sys.executable, "-m", "exporter"]
    out = subprocess.run([*exe, "replay", "--explain", str(log)], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    facts = out[out.index("-- facts of source") :].splitlines()
    kv_line = next(ln for ln in facts if ln.strip().startswith("kv_capacity_bytes"))
    n = next(i for i, ln in enumerate(log.read_text(encoding="utf-8").splitlines(), 1) if "TP0] KV Cache" in ln)
    assert f"tp16-interleaved.log:{n} " in kv_line and "logged" in kv_line and "15 other rank" in kv_line
    rep = json.loads(subprocess.run([*exe, "report", "--json", str(log)], capture_output=True, text=True, check=True, cwd=tmp_path).stdout)
    (srv,) = rep["sources"][0]["servers"]
    got = {r["metric"]: r for r in srv["provenance"]}
    r = got["hybrid_cache_kv_capacity_bytes"]
    assert (r["file"], r["line"], r["boot"], r["tp_rank"], r["basis"]) == ("tp16-interleaved.log", n, 1, 0, "logged")
    assert {r["labels"]["label"] for r in rep["sources"][0]["provenance"]} >= {"model", "tp_size"}
