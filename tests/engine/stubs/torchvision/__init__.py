"""A stand-in for torchvision, for tests/engine/vllm_shapes.py only (on its PYTHONPATH, nowhere else).

The engine's venv has no torchvision (tests/engine/install.sh removes the CUDA build the resolver brings), and
vLLM's Qwen3.5 and MiniCPM-V 4.6 modules import transformers' image processors, which import it at module level.
This lets those modules import so their state-shape class methods can be called; any attribute is a further
stand-in, and nothing of it runs: no shape or dtype function touches images.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0"


class _Stub(types.ModuleType):
    __path__: list[str] = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        mod = sys.modules.get(full) or _Stub(full)
        sys.modules[full] = mod
        return mod

    def __call__(self, *args, **kwargs):
        return self


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Stub(spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, _Finder())


def __getattr__(name: str):
    return _Stub("torchvision." + name)
