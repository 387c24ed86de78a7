"""Every family's state as vLLM itself computes it (issue 36): ``plan --engine vllm --json`` against vLLM's functions.

For every model config under fixtures/configs/ (a typical config of each family the capacity model reads,
exporter/capacity/families.py), the engine's own interpreter (``vllm_shapes.py``) builds vLLM's ``VllmConfig``,
instantiates the model class on the meta device and asks each layer vLLM registers for its KV-cache spec (the
attention and state layer counts, the attention page, the state page), and calls the class's own
``get_mamba_state_shape_from_config`` / ``get_mamba_state_dtype_from_config`` at TP 1-8, three SSM cache dtypes and
two draft tokens. ``plan`` must give the same layer counts, conv and SSM bytes per request (state bytes per layer ×
state layers), SSM dtype and KV bytes per token; ``plan --platform cpu`` the state page this CPU's engine would
allocate; and the family catalogue must say where the CPU build keeps a 16-bit SSM state (vLLM's
``platforms/cpu.py::_cpu_mamba_backend``).

The shape and dtype functions of every family are the same source in vLLM 0.32.0 (the engine here), 0.33.0 and
0.34.0 (``make oracle`` compares them: tests/oracle/check_families.py), so this proves the three. What does not run
here is said, not skipped: the multimodal modules (Qwen3.5, MiniCPM-V 4.6) import transformers' image processors,
which need torchvision, which the engine's venv does not have (install.sh removes its CUDA build), so
``stubs/torchvision`` stands in for that import only (no shape function touches it); OLMo-hybrid's GDN layer cannot
be built on the CPU (it asks Triton's GPU allocator), so its layer counts and KV page come from vLLM's
``ModelConfig`` (``layers_from`` / ``kv_from`` say which); kimi-k3's config the CPU build refuses (``NOT_RUN``).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import checks as c
import harness as h
import pytest

from exporter.capacity import families
from exporter.cli import main as cli

CONFIGS = h.ROOT / "fixtures" / "configs"
NOT_RUN = {
    "kimi-k3": "vLLM 0.32.0's CPU build refuses the config: its kimi-k3 hook sets a mamba block size, and "
    "'--mamba-block-size can only be set with --enable-prefix-caching' (the oracle covers it: tests/oracle)",
}
NAMES = sorted(p.stem for p in CONFIGS.glob("*.json") if p.stem not in NOT_RUN)
TPS = (1, 2, 4, 8)
CASES = (
    [{"tp": tp, "ssm": "auto", "spec": 0} for tp in TPS]
    + [{"tp": 1, "ssm": d, "spec": 0} for d in ("bfloat16", "float32")]
    + [{"tp": 2, "ssm": "bfloat16", "spec": 0}, {"tp": 1, "ssm": "auto", "spec": 2}]
)
# vLLM's ReplaySSM rings (--use-replayssm), where the class appends them (Nemotron-H)
REPLAYSSM = {
    "nemotron-h-8b": [{"tp": 1, "ssm": "auto", "spec": 0, "replayssm": 16}, {"tp": 2, "ssm": "bfloat16", "spec": 0, "replayssm": 32}]
}


@pytest.fixture(scope="module")
def figures(engine_py, workdir) -> dict:
    out = workdir / "vllm-shapes.json"
    req = {
        "workdir": str(workdir / "shapes"),
        "out": str(out),
        "configs": {n: json.loads((CONFIGS / f"{n}.json").read_text()) for n in NAMES},
        "cases": [{"config": n, **k} for n in NAMES for k in CASES + REPLAYSSM.get(n, [])],
    }
    env = {**h._base_env(), "PYTHONPATH": str(h.HERE / "stubs")}
    r = subprocess.run(
        [engine_py, str(h.HERE / "vllm_shapes.py")], input=json.dumps(req), capture_output=True, text=True, timeout=1800, env=env
    )
    assert r.returncode == 0 and out.exists(), (r.stdout + r.stderr)[-4000:]
    return json.loads(out.read_text())


def plan(name: str, *args: str) -> dict:
    """``plan --engine vllm --json`` (the command, in this process)."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli(["plan", "--config", str(CONFIGS / f"{name}.json"), "--engine", "vllm", "--json", *args])
    assert rc == 0, name
    return json.loads(buf.getvalue())


def split(shapes: list[list[int]], nbytes: list[int]) -> tuple[int, int]:
    """(conv bytes, SSM bytes) of one layer's state as vLLM returns it: (conv, ssm) pairs; a lone tensor is a conv
    state when it is 2-D (LFM2's short convolution), an SSM state when 3-D (Bailing's linear attention)."""
    if len(shapes) == 1:
        return (nbytes[0], 0) if len(shapes[0]) == 2 else (0, nbytes[0])
    assert len(shapes) == 2, shapes
    return nbytes[0], nbytes[1]


def _dtype(torch_name: str) -> str:
    return torch_name.removeprefix("torch.")


@pytest.mark.parametrize("name", NAMES)
def test_layer_counts_are_vllms(figures, name):
    f = figures["configs"][name]
    assert "error" not in f, f.get("error")
    p = plan(name)["model"]
    assert (p["full_attention_layers"], p["linear_layers"]) == (f["attention_layers"], f["state_layers"]), f["layers_from"]


@pytest.mark.parametrize("name", NAMES)
def test_conv_and_ssm_bytes_per_request_are_vllms(figures, name):
    layers = figures["configs"][name]["state_layers"]
    compared = []
    for k in (x for x in figures["cases"] if x["config"] == name and not x.get("replayssm")):
        if "error" in k:
            # the only refusal vLLM may make here is its divisibility check of a head count at that TP
            assert "divide" in k["error"] or "divisible" in k["error"], k["error"]
            continue
        args = ["--tp", str(k["tp"]), "--spec-draft-tokens", str(k["spec"])]
        if k["ssm"] != "auto":
            args += ["--mamba-ssm-cache-dtype", k["ssm"]]
        st = plan(name, *args)["state"]
        conv, ssm = split(k["shapes"], k["bytes"])
        want = {"conv": conv * layers, "ssm": ssm * layers, "ssm_dtype": _dtype(k["dtypes"][-1]) if ssm else None}
        got = {
            "conv": st["conv_bytes_per_request_per_gpu"],
            "ssm": st["ssm_bytes_per_request_per_gpu"],
            "ssm_dtype": st["ssm_dtype"] if ssm else None,
        }
        assert got == want, k
        compared.append((k["tp"], k["ssm"], k["spec"]))
    assert {(1, "auto", 0), (2, "auto", 0), (1, "bfloat16", 0), (1, "auto", 2)} <= set(compared), compared


@pytest.mark.parametrize("name", NAMES)
def test_kv_bytes_per_token_are_vllms(figures, name):
    f = figures["configs"][name]
    if f["attention_layers"] == 0:
        assert plan(name)["kv_bytes_per_token_per_gpu"] == 0
        return
    assert len(f["attention_pages_per_token"]) == 1, f  # one attention page for every attention layer
    assert plan(name)["kv_bytes_per_token_per_gpu"] == f["attention_page_per_token"] * f["attention_layers"], f["kv_from"]


@pytest.mark.parametrize("name", NAMES)
def test_cpu_state_page_and_16bit_rule_are_vllms(figures, name):
    """The state page the CPU engine allocates on this CPU (its SSM dtype rule applied), and where it keeps a 16-bit
    SSM state (its accelerated GDN backend) as the catalogue says."""
    f = figures["configs"][name]
    p = plan(name, "--platform", "cpu", "--cpu-isa", c.CPU_ISA)
    if "state_page_bytes" in f:  # the page of the layers the model built: the class's functions give the same
        assert f["state_page_bytes"] == f["cpu_state_page_bytes"], f
    assert p["state"]["bytes_per_request_per_gpu"] == f["cpu_state_page_bytes"] * f["state_layers"], (p["state"], f)
    fam = families.BY_KEY[p["model"].get("family") or ""]
    assert (f["cpu_backend_bf16"] == "gdn") is fam.cpu_gdn_backend, (name, f["cpu_backend_bf16"])


def test_every_family_has_a_proven_fixture():
    """Each family the capacity model reads names its fixture, and each fixture is proven here or says why not."""
    modelled = [f for f in families.CATALOGUE if not f.refused]
    assert {f.fixture for f in modelled} <= set(NAMES) | set(NOT_RUN)
    assert set(NAMES) | set(NOT_RUN) == {p.stem for p in Path(CONFIGS).glob("*.json")}


@pytest.mark.parametrize("name", sorted(REPLAYSSM))
def test_replayssm_rings_are_vllms(figures, name):
    """``--use-replayssm``: the class's shapes gain x / dt / B rings (``append_replayssm_ring``); plan's state gains
    the same bytes, conv and SSM unchanged."""
    layers = figures["configs"][name]["state_layers"]
    for k in (x for x in figures["cases"] if x["config"] == name and x.get("replayssm")):
        assert "error" not in k, k["error"]
        args = ["--tp", str(k["tp"]), "--use-replayssm", "--replayssm-buffer-len", str(k["replayssm"])]
        if k["ssm"] != "auto":
            args += ["--mamba-ssm-cache-dtype", k["ssm"]]
        st = plan(name, *args)["state"]
        assert len(k["shapes"]) == 5, k["shapes"]
        got = (st["conv_bytes_per_request_per_gpu"], st["ssm_bytes_per_request_per_gpu"], st["replayssm_ring_bytes_per_request_per_gpu"])
        assert got == (k["bytes"][0] * layers, k["bytes"][1] * layers, sum(k["bytes"][2:]) * layers), k
