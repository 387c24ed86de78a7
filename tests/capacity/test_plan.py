"""The ``plan`` subcommand: register() on a fresh parser, text/JSON output, bad-config errors (exit 2, no traceback)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.cli import plan

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "fixtures" / "configs"


def run_plan(argv: list[str], capsys) -> tuple[int, str, str]:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="command", required=True)
    plan.register(sub)
    args = ap.parse_args(["plan", *argv])
    rc = args.func(args)
    out, err = capsys.readouterr()
    return rc, out, err


def kimi_args(*extra: str) -> list[str]:
    return [
        "--config",
        str(CONFIGS / "kimi-k3.json"),
        "--engine",
        "sglang",
        "--tp",
        "8",
        "--kv-budget",
        "27.3",
        "--kv-cache-dtype",
        "fp8_e4m3",
        "--mamba-ssm-dtype",
        "bfloat16",
        "--mamba-full-memory-ratio",
        "0.15",
        "--radix-strategy",
        "extra_buffer",
        "--context-len",
        "19456",
        "--max-running-requests",
        "64",
        *extra,
    ]


def test_register_returns_parser_and_sets_func():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers()
    p = plan.register(sub)
    assert isinstance(p, argparse.ArgumentParser)
    args = ap.parse_args(["plan", "--config", "x.json"])
    assert args.func is plan.run and args.engine == "sglang" and args.tp == 1


def test_config_required():
    ap = argparse.ArgumentParser()
    plan.register(ap.add_subparsers())
    with pytest.raises(SystemExit):
        ap.parse_args(["plan"])


def test_kimi_text(capsys):
    rc, out, err = run_plan(kimi_args(), capsys)
    assert rc == 0 and err == ""
    assert "KV per token: 13,824 B (13.50 KiB) per GPU" in out
    assert "state per request: 29,039,616 B (27.69 MiB) per GPU" in out
    assert "221.55 MiB over 8 GPU(s)" in out
    assert "mamba slots per request: 5" in out
    assert "pool that binds: mamba" in out
    assert "skip decode lock: slots/request 5 → 4" in out


def test_kimi_json(capsys):
    rc, out, _ = run_plan(kimi_args("--json"), capsys)
    assert rc == 0
    d = json.loads(out)
    assert d["kv_bytes_per_token_per_gpu"] == 13_824
    assert d["state"]["ssm_bytes_per_request_per_gpu"] == 27_131_904
    assert d["state"]["conv_bytes_per_request_per_gpu"] == 1_907_712
    assert d["slots_per_request"] == 5
    s = d["sglang"]
    assert s["mamba_cap"] == s["mamba_slots"] // 5
    assert d["cap"] == s["max_running_requests"] and d["binding_pool"] == "mamba"
    flags = {e["flag"] for e in d["effects"]}
    assert {"--mamba-full-memory-ratio", "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "--disable-radix-cache"} <= flags
    assert all(e["summary"] for e in d["effects"])


def test_qwen38_bf16_kv_no_budget(capsys):
    rc, out, _ = run_plan(["--config", str(CONFIGS / "qwen3.8-27b.json")], capsys)
    assert rc == 0
    assert "KV per token: 65,536 B (64 KiB)" in out
    assert "ssm 144 MiB (float32)" in out
    assert "no --kv-budget/--gpu-memory" in out


def test_qwen38_fp8(capsys):
    rc, out, _ = run_plan(["--config", str(CONFIGS / "qwen3.8-27b.json"), "--kv-cache-dtype", "fp8", "--json"], capsys)
    assert rc == 0 and json.loads(out)["kv_bytes_per_token_per_gpu"] == 32_768


def test_qwen3_next_vllm(capsys):
    budget = str(47_878_721_024 / 2**30)
    rc, out, _ = run_plan(
        [
            "--config",
            str(CONFIGS / "qwen3-next-80b-a3b.json"),
            "--engine",
            "vllm",
            "--tp",
            "2",
            "--kv-budget",
            budget,
            "--context-len",
            "262144",
            "--vllm-version",
            "0.10.2",  # the worked log's release: prefix caching off for hybrids, A = 16
            "--json",
        ],
        capsys,
    )
    assert rc == 0
    v = json.loads(out)["vllm"]
    assert v["mode"] == "none" and v["checkpoint_blocks"] == 0
    assert (v["block_size"], v["page_bytes"], v["num_blocks"], v["kv_cache_tokens_old"]) == (544, 557_056, 7162, 973_760)
    assert round(v["max_concurrency"], 2) == 14.77


def test_gpu_memory_budget(capsys):
    rc, out, _ = run_plan(
        ["--config", str(CONFIGS / "nemotron-h-8b.json"), "--gpu-memory", "80", "--weights", "16", "--mem-fraction", "0.5", "--json"],
        capsys,
    )
    assert rc == 0
    assert json.loads(out)["sglang"]["rest_bytes"] == 24 * 2**30
    rc, out, _ = run_plan(["--config", str(CONFIGS / "nemotron-h-8b.json"), "--gpu-memory", "80"], capsys)
    assert rc == 0 and "weights not subtracted" in out


@pytest.mark.parametrize(
    "content,needle",
    [
        (None, "config file not found"),
        ("{not json", "not valid JSON"),
        ("[1, 2, 3]", "JSON object"),
        ('{"hidden_size": 8}', "num_hidden_layers"),
    ],
)
def test_bad_config_exit_2(tmp_path, capsys, content, needle):
    path = tmp_path / "config.json"
    if content is not None:
        path.write_text(content)
    rc, out, err = run_plan(["--config", str(path)], capsys)
    assert rc == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--kv-budget", "-1"], "--kv-budget must be > 0"),
        (["--kv-cache-dtype", "int3"], "unknown dtype"),
        (["--tp", "0"], "--tp must be"),
        (["--gpu-memory", "10", "--weights", "100"], "no memory left"),
        (["--radix-strategy", "extra_buffer_lazy", "--sglang-version", "0.5.10", "--kv-budget", "10"], "0.5.13"),
    ],
)
def test_bad_options_exit_2(capsys, extra, needle):
    rc, _, err = run_plan(["--config", str(CONFIGS / "qwen3.8-27b.json"), *extra], capsys)
    assert rc == 2 and needle in err and "Traceback" not in err


def test_subprocess_bad_config_no_traceback(tmp_path):
    code = (
        "import argparse, sys\n"
        "from exporter.cli import plan\n"
        "ap = argparse.ArgumentParser(); sub = ap.add_subparsers()\n"
        "plan.register(sub)\n"
        "a = ap.parse_args(sys.argv[1:])\n"
        "sys.exit(a.func(a))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "plan", "--config", str(tmp_path / "missing.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 2
    assert r.stderr.strip() == f"plan: error: config file not found: {tmp_path / 'missing.json'}"
    assert r.stdout == ""


def test_subprocess_ok():
    code = (
        "import argparse, sys\n"
        "from exporter.cli import plan\n"
        "ap = argparse.ArgumentParser(); sub = ap.add_subparsers()\n"
        "plan.register(sub)\n"
        "a = ap.parse_args(sys.argv[1:])\n"
        "sys.exit(a.func(a))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, "plan", "--config", str(CONFIGS / "kimi-k3.json"), "--tp", "8", "--mamba-ssm-dtype", "bf16"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    assert "27 KiB" in r.stdout and "221.55 MiB over 8 GPU(s)" in r.stdout


def test_plan_says_when_one_request_of_the_context_does_not_fit(capsys):
    """Without --context-len the engines use the config's (262,144 for Qwen3.8): a small pool is said to hold
    less than one such request (SGLang) or to keep vLLM from starting, and the fallback is named."""
    cfg = str(CONFIGS / "qwen3.8-27b.json")
    rc, out, _ = run_plan(["--config", cfg, "--kv-budget", "10"], capsys)
    assert rc == 0 and "holds less than one request of the context length (262,144)" in out
    assert "context length 262,144 from the config" in out
    rc, out, _ = run_plan(["--config", cfg, "--kv-budget", "3", "--engine", "vllm"], capsys)
    assert rc == 0 and "vLLM refuses to start" in out and "mamba cache mode align" in out
    rc, out, _ = run_plan(["--config", cfg, "--kv-budget", "40", "--context-len", "32768"], capsys)
    assert rc == 0 and "WARNING" not in out
