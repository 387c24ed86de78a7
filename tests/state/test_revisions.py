"""The revision rule (exporter/state/revisions.py): vLLM 0.34 sizes its KV cache before and again after warmup, in one
boot; the later message settles the earlier estimate (issue 35 item 1). Not a restart, the final value exported, an
estimate never exported, and both kept, each with its line, for ``report``."""

from __future__ import annotations

import pytest

from exporter.presentation.explain import proofs
from exporter.presentation.report import revisions_of
from exporter.state.pipeline import Pipeline
from parsers.numbers import GIB

approx = pytest.approx
BANNER = "(APIServer pid=1) INFO 12-03 09:00:00 [startup.py:38] vLLM server version {v}, serving model Qwen/Qwen3-Next-80B-A3B-Instruct"
ENGINE = (
    "(EngineCore pid=142) INFO 12-03 09:00:15 [core.py:153] Initializing a V1 LLM engine (v{v}) with config: "
    "model='Qwen/Qwen3-Next-80B-A3B-Instruct', dtype=torch.bfloat16, max_seq_len=262144, tensor_parallel_size=2, "
    "kv_cache_dtype=auto, device_config={dev}, enable_prefix_caching=True"
)
AVAILABLE = "(Worker_TP0 pid=201) INFO 12-03 09:02:03 [gpu_worker.py:795] Available KV cache memory: 47.13 GiB"
WARMUP = (
    "(Worker_TP0 pid=201) INFO 12-03 09:03:14 [extensible_kv_cache.py:693] Memory after warmup: 11.87 GiB free, 0.01 GiB "
    "committed to the KV cache, 2.4 GiB kept for transient activations (2.4 GiB allocated at peak, 1.9 GiB of torch "
    "reservation growth); 7031 KV cache blocks (46.35 GiB) fit within the requested 125.83 GiB. Torch may reserve up to 20.52 GiB."
)
KV_SIZE = (
    "(EngineCore pid=142) INFO 12-03 09:03:15 [kv_cache_utils.py:1168] GPU KV cache size: 3,963,730 tokens, Maximum "
    "concurrency for 262,144 tokens per request: 15.12x"
)
EXTENDED = "(Worker_TP0 pid=201) INFO 12-03 09:03:15 [extensible_kv_cache.py:536] Extended KV cache to 7031 blocks (46.35 GiB)."
STATS = (
    "(APIServer pid=1) INFO 12-03 09:04:00 [loggers.py:335] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
    "throughput: 50.0 tokens/s, Running: 16 reqs, Waiting: 9 reqs, GPU KV cache usage: 40.0%, Prefix cache hit rate: 0.0%"
)


def feed(lines: list[str]) -> Pipeline:
    pipe = Pipeline("vllm")
    for line in lines:
        pipe.feed_lines("s", [line])
    return pipe


def server(pipe: Pipeline):
    src = pipe.sources["s"]
    return src, src.servers["0"]


def boot(v: str = "0.34.0", dev: str = "cuda") -> list[str]:
    return [BANNER.format(v=v), ENGINE.format(v=v, dev=dev)]


def test_the_estimate_then_the_final_value_is_one_boot_whose_fact_is_revised():
    pipe = feed([*boot(), AVAILABLE, WARMUP, KV_SIZE, EXTENDED, STATS])
    src, srv = server(pipe)
    assert src.restarts == 0
    assert srv.capacity["kv_capacity_bytes"] == approx(46.35 * GIB)
    assert srv.capacity["kv_blocks"] == 7031
    revs = [r for r in revisions_of(srv) if r["fact"] == "kv_capacity_bytes"]
    assert [(r["stage"], r["value"], r["in_force"]) for r in revs] == [
        ("profile", 47.13, False),
        ("measured", 46.35, False),
        ("final", 46.35, True),
    ]
    assert revs[0]["line"] == "Available KV cache memory: 47.13 GiB"
    assert revs[-1]["line"] == "Extended KV cache to 7031 blocks (46.35 GiB)."


def test_the_estimate_is_not_exported_while_warmup_runs():
    src, srv = server(feed([*boot(), AVAILABLE]))
    assert "kv_capacity_bytes" not in srv.capacity  # 0.34 on CUDA sizes again after warmup
    assert srv.revisions["kv_capacity_bytes"][0].value == approx(47.13 * GIB)
    src, srv = server(feed([*boot(), AVAILABLE, WARMUP]))
    assert srv.capacity["kv_capacity_bytes"] == approx(46.35 * GIB)


def test_a_pre_warmup_figure_after_the_measured_one_changes_nothing():
    late = AVAILABLE.replace("Worker_TP0 pid=201", "Worker_TP1 pid=202").replace("47.13", "47.2")
    src, srv = server(feed([*boot(), AVAILABLE, WARMUP, late]))
    assert srv.capacity["kv_capacity_bytes"] == approx(46.35 * GIB)
    assert src.restarts == 0


@pytest.mark.parametrize(
    ("v", "dev", "extra"),
    [
        ("0.33.0", "cuda", []),  # sized once, before warmup: the line is the pool
        ("0.34.0", "xpu", []),  # the extensible KV cache is CUDA and ROCm only
        (
            "0.34.0",
            "cuda",
            [
                "(EngineCore pid=142) WARNING 12-03 09:01:00 [abstract.py:175] Disabling the extensible KV cache: the CUDA "
                "driver does not support virtual memory management. The KV cache will be sized from profiling estimates "
                "instead of measured memory."
            ],
        ),
    ],
)
def test_a_server_that_sizes_before_warmup_exports_its_line_at_once(v, dev, extra):
    src, srv = server(feed([*boot(v, dev), *extra, AVAILABLE]))
    assert srv.capacity["kv_capacity_bytes"] == approx(47.13 * GIB)


def test_the_kv_size_line_closes_the_sizing_of_a_server_that_printed_no_final_line():
    # 0.34 on CUDA where no line of the extensible cache followed: the KV-size line says the sizing is over
    src, srv = server(feed([*boot(), AVAILABLE, KV_SIZE]))
    assert srv.capacity["kv_capacity_bytes"] == approx(47.13 * GIB)


def test_the_auto_fit_estimate_waits_for_the_length_fitted_after_warmup():
    estimate = (
        "(EngineCore pid=142) INFO 12-03 14:01:19 [kv_cache_planning.py:1478] Auto-fit max_model_len: reduced from 262144 to "
        "211328 to fit in available KV cache memory (13.23 GiB GPU); the final length is set after CUDA graph capture and warmup"
    )
    final = (
        "(EngineCore pid=142) INFO 12-03 14:01:45 [kv_cache_planning.py:1494] --max-model-len auto reduced max_model_len from "
        "211328 to 163904 (10.31 GiB GPU left for the KV cache after CUDA graph capture and warmup)."
    )
    src, srv = server(feed([*boot(), estimate]))
    assert "context_length_tokens" not in srv.capacity
    src, srv = server(feed([*boot(), estimate, final]))
    assert srv.capacity["context_length_tokens"] == 163904
    assert [r["value"] for r in revisions_of(srv) if r["fact"] == "context_length_tokens"] == [211328, 163904]


def test_the_same_boot_message_after_runtime_lines_is_still_a_new_boot():
    """A revision is a later message settling an earlier one; a boot line after runtime lines is a restart, as before."""
    src, srv = server(feed([*boot(), AVAILABLE, WARMUP, KV_SIZE, EXTENDED, STATS, *boot(), AVAILABLE]))
    assert src.restarts == 1
    assert "kv_capacity_bytes" not in srv.capacity  # the new boot's estimate, not the old boot's final value
    assert [r.value for r in srv.revisions["kv_capacity_bytes"]] == [approx(47.13 * GIB)]


def test_the_proof_of_a_revised_fact_names_the_line_it_revises():
    """exporter/state/provenance.py rule 4 for vLLM 0.34's stages: the final line proves the fact and names the estimate's."""
    lines = [*boot(), AVAILABLE, WARMUP, KV_SIZE, EXTENDED, STATS]
    src, srv = server(feed(lines))
    got = {r["metric"]: r for r in proofs(src, srv)}
    kv = got["hybrid_cache_kv_capacity_bytes"]
    assert (kv["basis"], kv["line"], kv["revises"]["line"]) == ("logged", lines.index(EXTENDED) + 1, lines.index(AVAILABLE) + 1)
    assert "not a new boot" in kv["rule"]
    # settled by the KV-size line: the estimate's own line proves it
    lines = [*boot(), AVAILABLE, KV_SIZE]
    src, srv = server(feed(lines))
    kv = {r["metric"]: r for r in proofs(src, srv)}["hybrid_cache_kv_capacity_bytes"]
    assert kv["line"] == lines.index(AVAILABLE) + 1 and "closed the sizing" in kv["rule"] and "revises" not in kv
