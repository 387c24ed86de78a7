"""An independent re-implementation of the engines' pure sizing arithmetic, for the grid test.

Written from the released wheels (SGLang 0.5.23, vLLM 0.33.0 and 0.34.0), one function per engine step, each citing the
engine file and function it follows (``cite:`` lines; ``make oracle`` checks them against the downloaded wheels).
It reads the raw config dict itself and shares no code with ``exporter.capacity``: two implementations agreeing
is the check.
"""

SGLANG_RELEASE = "0.5.23"
VLLM_RELEASE = "0.34.0"  # the newest transcribed (vllm_0_34_0.py); vllm_0_33_0.py stays checked against its own
