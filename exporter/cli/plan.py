"""``plan``: capacity plan for a hybrid model from its HF config.json (no server needed).

Exit codes: 0 ok, 2 bad input (missing/invalid config, bad option combination).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, fields
from typing import Any

from .. import capacity as cap
from ..advice.plan import PlanRequest, UsageError, build, from_log, render, render_from_log, to_dict
from ..app import replay
from . import COMMANDS
from .common import add_timezone_args, add_year_args, set_log_clock


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``plan`` subcommand to an ``argparse`` subparsers object; sets ``func=run``."""
    p = subparsers.add_parser(
        "plan",
        help=COMMANDS["plan"],
        description="Capacity plan for a hybrid linear-attention model from its HuggingFace config.json.",
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--config", metavar="PATH", help="HF config.json (top level or nested text_config)")
    what.add_argument(
        "--from-log",
        metavar="FILE",
        nargs="+",
        help="plan from what a server's log shows instead: its pools as logged, the model against them, every flag's effect "
        "started from the logged pools (like report's what-if)",
    )
    p.add_argument("--engine", choices=("sglang", "vllm"), default="sglang")
    p.add_argument("--tp", type=int, default=1, metavar="N", help="tensor parallel size (default 1)")
    mem = p.add_mutually_exclusive_group()
    mem.add_argument("--kv-budget", type=float, metavar="GiB", help="per-GPU memory for KV + linear state")
    mem.add_argument("--gpu-memory", type=float, metavar="GiB", help="per-GPU memory; budget = this × --mem-fraction − --weights/tp")
    p.add_argument(
        "--mem-fraction",
        type=float,
        default=0.9,
        help="with --gpu-memory: static fraction (default 0.9; vLLM 0.34 with gpu_memory_utilization unset: 1.0)",
    )
    p.add_argument("--weights", type=float, default=None, metavar="GiB", help="with --gpu-memory: total weight GiB over all GPUs")
    p.add_argument("--kv-cache-dtype", default="auto", help="auto|bfloat16|fp8|fp8_e4m3|… (default auto = model dtype)")
    p.add_argument(
        "--mamba-ssm-dtype",
        "--mamba-ssm-cache-dtype",
        dest="mamba_ssm_dtype",
        default=None,
        help="float32|bfloat16|float16 (default: config, else engine default)",
    )
    p.add_argument("--mamba-full-memory-ratio", type=float, default=0.9, metavar="R", help="SGLang mamba:KV byte ratio (default 0.9)")
    p.add_argument("--max-mamba-cache-size", type=int, default=None, metavar="N", help="SGLang explicit mamba slot count")
    p.add_argument(
        "--radix-strategy",
        default="auto",
        choices=("auto", "no_buffer", "extra_buffer", "extra_buffer_lazy", "disable"),
        help="SGLang --mamba-radix-cache-strategy, or 'disable' for --disable-radix-cache",
    )
    p.add_argument("--disable-overlap-schedule", action="store_true", help="SGLang: overlap scheduler off")
    p.add_argument("--skip-decode-lock", action="store_true", help="SGLang: SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1")
    p.add_argument("--sglang-version", default=None, help="SGLang version for the slots table (default latest, 0.5.23)")
    p.add_argument("--vllm-version", default=None, help="vLLM version for its release table (default latest, 0.34.0)")
    p.add_argument(
        "--mamba-cache-mode",
        choices=("auto", "none", "align"),
        default="auto",
        help="vLLM mamba cache mode (default auto: align when prefix caching is on, the default for hybrids from 0.26)",
    )
    p.add_argument(
        "--no-enable-prefix-caching", dest="prefix_caching", action="store_false", default=None, help="vLLM: prefix caching off (mode none)"
    )
    p.add_argument(
        "--platform",
        choices=cap.PLATFORMS,
        default="hopper",
        help="where the engine runs: vLLM block alignment, GDN kernel and SGLang page size (default hopper; blackwell: SGLang "
        "64-token pages; cpu: vLLM's CPU build, 128-token blocks; docs/sizing.md)",
    )
    p.add_argument(
        "--cpu-isa",
        choices=cap.CPU_ISAS,
        default="avx512-bf16",
        help="--platform cpu: what the CPU has, from the flags in /proc/cpuinfo (default avx512-bf16: avx512_bf16, AMX CPUs "
        "too; avx512: avx512f without it; avx2: x86 without AVX-512; other: not x86). vLLM keeps the SSM state float32 "
        "only on avx512-bf16 and takes an fp8 KV cache only on avx512-bf16/avx512 (docs/sizing.md)",
    )
    p.add_argument(
        "--gdn-prefill-backend",
        choices=cap.GDN_BACKENDS,
        default="auto",
        help="vLLM --gdn-prefill-backend (default auto: FlashInfer on Hopper, and on Blackwell with 128-dim keys; else Triton)",
    )
    p.add_argument("--num-gpu-blocks-override", type=int, default=None, metavar="N", help="vLLM: fixed number of KV blocks")
    p.add_argument(
        "--use-replayssm",
        action="store_true",
        help="vLLM: ReplaySSM decode; its Mamba2 layers keep x/dt/B rings of --replayssm-buffer-len tokens (Nemotron-H)",
    )
    p.add_argument("--replayssm-buffer-len", type=int, default=16, metavar="N", help="vLLM: ReplaySSM ring length (default 16)")
    p.add_argument("--context-len", type=int, default=None, metavar="TOKENS", help="tokens per request (vLLM: max_model_len)")
    p.add_argument("--max-running-requests", "--max-num-seqs", dest="max_running_requests", type=int, default=None, metavar="N")
    p.add_argument(
        "--spec-draft-tokens", type=int, default=0, metavar="D", help="speculative draft tokens (SGLang D / vLLM num_speculative_tokens)"
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    add_timezone_args(p)  # --from-log reads a log as replay does
    add_year_args(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if args.from_log:
        set_log_clock(args)
        pipe, failed = replay(args.from_log, None, None, None)
        if failed:
            print(f"plan: error: {failed} file(s) could not be read (above)", file=sys.stderr)
            return 1
        servers = from_log(pipe)
        if args.json:
            print(
                json.dumps([dict(s, effects=[asdict(e) for e in s["effects"]]) for s in servers], indent=2, ensure_ascii=False, default=str)
            )
        else:
            print(render_from_log(servers))
        return 0
    try:
        plan, effects, notes = build(PlanRequest(**{f.name: getattr(args, f.name) for f in fields(PlanRequest)}))
    except (cap.ConfigError, UsageError) as e:
        print(f"plan: error: {e}", file=sys.stderr)
        return 2
    assert plan is not None
    if args.json:
        print(json.dumps(to_dict(plan, effects, notes), indent=2, ensure_ascii=False))
    else:
        print(render(plan, effects, notes))
    return 0
