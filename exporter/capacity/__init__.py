"""The capacity model of hybrid linear-attention models: full-attention KV plus per-request conv/SSM state,
and what it assumes of the engines: their releases and their defaults (below the state, above the parsers).

* :mod:`.version`  — engine releases: one parser of version strings, the ranges a log proves;
* :mod:`.defaults` — the engines' defaults by release, one table;

* :mod:`.families` — the family catalogue (one entry per hybrid family; :mod:`.readers` reads each config);
* :mod:`.model`    — dtypes and what a ``config.json`` says (:class:`ModelSpec`);
* :mod:`.sizing`   — bytes per token and per request, SGLang's pool sizing and slots table by release;
* :mod:`.vllm`     — vLLM's block pool by release;
* :mod:`.planning` — a plan for one set of inputs (``hybrid-cache-exporter plan``);
* :mod:`.effects`  — the expected effect of a flag, from a log (:class:`ObservedCapacity`) or from a plan.

docs/sizing.md explains the arithmetic; tests/oracle/ re-implements it independently from the engines' wheels.
``from exporter import capacity as cap`` sees every name below.
"""

from .effects import *  # noqa: F403
from .model import *  # noqa: F403
from .planning import *  # noqa: F403
from .sizing import *  # noqa: F403
from .sizing import LATEST_SGLANG as LATEST_SGLANG
from .vllm import *  # noqa: F403
