"""Label values from bounded vocabularies (issue 29, item 2; exporter/catalogues/contract.py ``LABELS``,
parsers/labels.py).

A label's value read from a log is named as the engine names it (the first of a list of model
names, as vLLM's own ``model_name`` label; the method of a speculative config), and one out of its
label's bound (too long, characters no engine writes there) is dropped: its line counts
``unrecognized``, the rest of the line is read, and the label shows "". Lines of the real shapes
(vLLM 0.33's ``non-default args``, 0.8's engine config, SGLang's ``server_args`` dict and its
``Using KV cache dtype``), with the values a paste or a glued line gives.
"""

from __future__ import annotations

import pytest

from exporter.app import exposition, new_pipeline
from exporter.catalogues import contract as C
from exporter.exposition.collector import server_info
from parsers import events as ev
from parsers import parse_line

V = "(APIServer pid=1) INFO 11-01 10:00:00 [startup.py:91] "
S = "[2026-10-10 11:54:02] "
DECODE = "[2026-10-10 12:00:00] Decode batch, #running-req: 1, #full token: 64, full token usage: 0.00, mamba num: 5, mamba usage: 0.04, #queue-req: 0"


def run(lines: list[str]):
    pipe = new_pipeline(None)
    pipe.feed_lines("s", lines)
    pipe.finish()
    return pipe, pipe.sources["s"]


def test_a_list_of_served_model_names_is_its_first():
    """`served_model_name: ['a', 'b']` is `a`, as vLLM's own model_name label (before: the list's
    repr was the label)."""
    line = (
        V
        + "non-default args: {'model': 'Qwen/Qwen3.6-35B-A3B', 'served_model_name': ['qwen3.6-35b-a3b', 'qwen3.6-35b-a3b-autoround'], 'max_num_seqs': 16}"
    )
    pipe, src = run([line])
    assert src.config["served_model_name"] == "qwen3.6-35b-a3b" and src.lines == {"parsed": 1, "ignored": 0, "unrecognized": 0}
    assert server_info(src)["model"] == "qwen3.6-35b-a3b"
    assert b'model="qwen3.6-35b-a3b"' in exposition(pipe)


def test_the_speculative_label_is_the_method():
    line = (
        "INFO 04-01 10:00:00 [core.py:58] Initializing a V1 LLM engine (v0.8.3) with config: model='meta-llama/Llama-3.1-8B-Instruct', "
        "speculative_config=SpeculativeConfig(method='eagle', model='yuhuili/EAGLE-LLaMA3.1-Instruct-8B', num_spec_tokens=3), "
        "tensor_parallel_size=1, served_model_name=meta-llama/Llama-3.1-8B-Instruct"
    )
    _, src = run([line])
    assert server_info(src)["speculative"] == "eagle"
    assert src.config["speculative_config"].startswith("SpeculativeConfig(")  # the fact (speculative on) is kept whole
    _, src = run([V + "non-default args: {'model': 'm', 'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}}"])
    assert server_info(src)["speculative"] == "mtp"
    _, src = run([S + "server_args={'model_path': 'm', 'speculative_algorithm': 'NEXTN'}"])
    assert server_info(src)["speculative"] == "NEXTN"


@pytest.mark.parametrize(
    ("line", "key", "label"),
    [
        # glued text: a download bar after the dtype, a shard bar after the TP size
        (S + "Using KV cache dtype: torch.bfloat16config.json: 4.33kB [00:00, 24.6MB/s]", "kv_cache_dtype", "kv_cache_dtype"),
        (S + "server_args={'model_path': 'm', 'tp_size': '2}model-00001-of-00004.safetensors: 100%|█'}", "tp_size", "tp_size"),
        # a model path with spaces and a bracket, a name longer than any
        (S + "server_args={'model_path': '/data/my models/q (old)', 'tp_size': 2}", "model_path", "model"),
        (S + "server_args={'served_model_name': '" + "q" * 300 + "', 'tp_size': 2}", "served_model_name", "model"),
        (
            S + "server_args={'model_path': 'm', 'mamba_radix_cache_strategy': 'extra buffer!', 'tp_size': 2}",
            "mamba_radix_cache_strategy",
            "radix_cache_strategy",
        ),
    ],
)
def test_a_value_out_of_bound_is_dropped_and_its_line_unrecognized(line: str, key: str, label: str):
    parsed = parse_line(line, "sglang")
    assert parsed.outcome == ev.UNRECOGNIZED and "label value out of bound" in parsed.reason
    _, src = run([line, DECODE])
    assert key not in src.config and server_info(src)[label] == ""
    assert src.lines["unrecognized"] == 1
    if "tp_size" in line and key != "tp_size":
        assert src.config["tp_size"] == 2  # the rest of the line is read


def test_a_version_out_of_bound():
    _, src = run([V.replace("startup.py:91", "api_server.py:1839") + "vLLM API server version 0.11.0config.json:"])
    assert src.version is None and src.lines["unrecognized"] == 1 and src.life == "starting"  # still a boot line


def test_the_collector_never_shows_a_value_out_of_bound():
    """Whatever reached the state (a snapshot an older release saved): "" instead."""
    _, src = run([S + "server_args={'model_path': 'Qwen/Qwen3-Next-80B-A3B-Instruct', 'tp_size': 2}"])
    src.config.update({"kv_cache_dtype": "torch.bfloat16config.json: 4.33kB", "served_model_name": "['a', 'b']"})
    src.version = "0.11.0 + glued"
    info = server_info(src)
    assert (info["kv_cache_dtype"], info["model"], info["version"], info["tp_size"]) == ("", "a", "", "2")
    assert all(C.LABEL[k].admits(v) for k, v in info.items())


def test_a_dp_tag_longer_than_the_label_allows_is_no_rank():
    """A DP tag of 7 digits is no rank (the label's bound: 6): its lines are counted in
    `dp_rank_limit_lines`, not stored, on the line path and the bulk scanner's."""
    lines = [DECODE.replace("[2026-10-10 12:00:00]", f"[2026-10-10 12:00:{s:02d} DP1234567]") for s in range(60)]
    for how in ("lines", "one by one"):
        pipe = new_pipeline(None)
        if how == "lines":
            pipe.feed_lines("s", lines)
        else:
            for ln in lines:
                pipe.feed("s", ln)
        pipe.finish()
        src = pipe.sources["s"]
        assert src.servers == {} and src.dp_dropped == 60 and src.lines["parsed"] == 60, how


def test_a_damaged_ssm_dtype_is_no_crash(tmp_path):
    """`'mamba_ssm_dtype': 'float3'` (a cut value): before, the facts raised on it and replay said
    "cannot read" and lost the rest of the file. Now the value is out of its label's bound (the
    dtypes the engines take): dropped, the line unrecognized, every other line read."""
    from pathlib import Path

    from exporter.app import replay

    root = Path(__file__).resolve().parents[2]
    text = (root / "fixtures" / "sglang" / "v0.5.23.log").read_text(encoding="utf-8")
    assert "'mamba_ssm_dtype': " in text
    log = tmp_path / "v0.5.23.log"
    log.write_text(text.replace("'mamba_ssm_dtype': ", "'mamba_ssm_dtype': 'float3', 'x': ", 1), encoding="utf-8")
    pipe, failed = replay([str(log)], None, None, None)
    assert failed == 0
    src = pipe.sources["v0.5.23"]
    want, _ = replay([str(root / "fixtures" / "sglang" / "v0.5.23.log")], None, None, None)
    assert src.lines["unrecognized"] == want.sources["v0.5.23"].lines["unrecognized"] + 1
    assert sum(src.lines.values()) == sum(want.sources["v0.5.23"].lines.values())
    assert "mamba_ssm_dtype" not in src.config or src.config["mamba_ssm_dtype"] != "float3"
    exposition(pipe)  # the scrape derives the facts: no error


def test_every_ssm_dtype_the_label_admits_the_capacity_model_reads():
    import re

    from exporter.capacity.model import normalize_dtype

    words = re.findall(r"[a-z0-9]+", C.LABEL["mamba_ssm_dtype"].pattern.replace("torch\\.", ""))
    assert len(words) >= 8
    for w in words:
        for v in (w, "torch." + w):
            if C.LABEL["mamba_ssm_dtype"].admits(v):
                normalize_dtype(v)  # raises on a dtype it does not know


def test_the_facts_read_a_damaged_dtype_as_not_logged():
    """Whatever reached the state (a snapshot an older release saved): no error, the default."""
    from exporter.state import facts

    _, src = run([S + "server_args={'model_path': 'm', 'tp_size': 2}"])
    src.config["mamba_ssm_dtype"] = "float3"
    assert facts.sglang_ssm_dtype(src)[0] == "float32"
    src.config["mamba_ssm_cache_dtype"] = "garbage"
    src.config["mamba_cache_dtype"] = "more garbage"
    assert facts.vllm_ssm_dtype(src) in ("float32", "bfloat16")
