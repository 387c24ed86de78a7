"""The engines' own command lines, read from their released wheels: how each option the exporter names is declared.

    python -m tests.oracle.engine_argparse --python ENGINE_VENV/bin/python   # rewrites engine_flags.json
    python -m tests.oracle.engine_argparse --python ENGINE_VENV/bin/python --engine vllm   # only vLLM's entries

For each release (SGLang 0.5.15-0.5.23, vLLM 0.33.0 and 0.34.0) the wheel is taken from the wheel cache outside the
clone that ``make oracle`` and the release check use (``--cache``, downloaded there with ``pip download --no-deps``
when missing) and unpacked into a temporary directory, and its parser is built by the engine's own code (``ServerArgs.add_cli_args`` /
``EngineArgs.add_cli_args``) in a Python that has torch and transformers (the vLLM CPU venv of this machine, see
docs/rules.md#switches); the modules that Python lacks are mocked, found one by one. The declarations of the
options in ``OPTIONS`` (action, nargs, type, choices) are written to ``engine_flags.json``, which
``tests/rules/test_switches.py`` checks the flag catalogue against. Not part of ``make test`` (network, minutes).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tests.release.source import DEFAULT_CACHE, download

HERE = Path(__file__).resolve().parent
OUT = HERE / "engine_flags.json"
RELEASES = {"sglang": [f"0.5.{n}" for n in range(15, 24)], "vllm": ["0.33.0", "0.34.0"]}
ENTRY = {"sglang": ("sglang.srt.server_args", "ServerArgs.add_cli_args"), "vllm": ("vllm.engine.arg_utils", "EngineArgs.add_cli_args")}
# what the flag catalogue recommends and what the advice names besides (caveats, notes)
OPTIONS = (
    "--mamba-ssm-dtype",
    "--mamba-ssm-cache-dtype",
    "--kv-cache-dtype",
    "--mamba-full-memory-ratio",
    "--max-mamba-cache-size",
    "--mamba-radix-cache-strategy",
    "--mamba-scheduler-strategy",
    "--disable-radix-cache",
    "--enable-unified-memory",
    "--schedule-conservativeness",
    "--max-running-requests",
    "--max-num-seqs",
    "--language-model-only",
    "--gpu-memory-utilization",
    "--attention-backend",
    "--linear-attn-backend",
    "--mamba-backend",
    "--context-length",
    "--max-model-len",
    "--enable-linear-replayssm-spec",
    "--page-size",
    "--gdn-prefill-backend",
    "--enable-prefix-caching",
    "--mamba-cache-mode",
)

# runs inside the engine's Python: prints {option: declaration} of the parser the engine builds
BUILD = r"""
import importlib, importlib.abc, importlib.machinery, json, os, sys
from unittest import mock
MOCK = set(filter(None, os.environ.get("MOCK", "").split(",")))
class Mocker(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        return importlib.machinery.ModuleSpec(name, self, is_package=True) if name.split(".")[0] in MOCK else None
    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name); m.__path__ = []; m.__spec__ = spec; m.__name__ = spec.name; m.__all__ = []
        return m
    def exec_module(self, module):
        pass
root, modname, fn = sys.argv[1:4]
import importlib.metadata
_version = importlib.metadata.version
def _mocked_version(name):  # a mocked package has no metadata: newer releases ask for its version at import
    try:
        return _version(name)
    except importlib.metadata.PackageNotFoundError:
        if name.replace("-", "_") in MOCK:
            return "0.0.0"
        raise
importlib.metadata.version = _mocked_version
own = modname.split(".")[0]
sys.path.insert(0, root)
sys.meta_path.insert(0, Mocker())
import argparse
try:  # an older engine registers model configs a newer transformers has: keep the newer ones
    import transformers
    _reg = transformers.AutoConfig.register
    transformers.AutoConfig.register = staticmethod(lambda *a, **k: _reg(*a, **{**k, "exist_ok": True}))
except Exception:
    pass
for _ in range(200):
    try:
        mod = importlib.import_module(modname)
        break
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if not top or top in MOCK or top == own:
            raise
        MOCK.add(top)
        for k in [k for k in sys.modules if k.split(".")[0] in (own, top)]:
            del sys.modules[k]
obj = mod
for part in fn.split("."):
    obj = getattr(obj, part)
p = argparse.ArgumentParser()
obj(p)
out = {}
for a in p._actions:
    for o in a.option_strings:
        out[o] = {"action": type(a).__name__, "nargs": a.nargs, "type": getattr(a.type, "__name__", None),
                  "choices": [str(c) for c in a.choices] if a.choices else None}
json.dump(out, sys.stdout)
"""


def unpack(engine: str, version: str, cache: Path, into: Path) -> Path:
    """The wheel of ``engine==version`` from ``cache`` (downloaded when missing), unpacked under ``into``."""
    root = into / f"{engine}-{version}"
    zipfile.ZipFile(download(cache, engine, version)).extractall(root)
    return root


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="a Python with torch and transformers")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where the wheels are kept (default {DEFAULT_CACHE})")
    ap.add_argument("--engine", choices=sorted(RELEASES), help="only this engine's releases (the others' entries are kept)")
    a = ap.parse_args(argv)
    out: dict[str, dict] = json.loads(OUT.read_text()) if a.engine else {}
    for engine, versions in RELEASES.items():
        if a.engine and engine != a.engine:
            continue
        mod, fn = ENTRY[engine]
        for v in versions:
            with tempfile.TemporaryDirectory(prefix="hce-argparse-") as tmp:
                root = unpack(engine, v, a.cache, Path(tmp))
                env = {"MOCK": "torchcodec,torchvision,torchaudio", "VLLM_TARGET_DEVICE": "cpu", "PATH": "/usr/bin:/bin"}
                r = subprocess.run([a.python, "-c", BUILD, str(root), mod, fn], capture_output=True, text=True, env=env, timeout=600)
                if r.returncode:
                    print(f"{engine} {v}: {r.stderr[-800:]}", file=sys.stderr)
                    return 1
                parsed = json.loads(r.stdout)
                out[f"{engine}=={v}"] = {o: parsed[o] for o in OPTIONS if o in parsed}
                print(f"{engine} {v}: {len(parsed)} options, {len(out[f'{engine}=={v}'])} named by the exporter")
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
