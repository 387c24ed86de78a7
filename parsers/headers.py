"""The header pattern texts, one spelling of each: the engines' default headers and the rank tags.

Every regex that reads one of these headers is compiled from the text here: ``prefix`` (the fast
paths of ``split_header``), ``preamble`` (the generic reader's tokens), ``shapes`` (the learned
whole-line templates of batch lines) and, through ``shapes``, the bulk scanner
(``exporter/state/scan.py``; its C twin ``exporter/_scan.c`` reads the same header by hand, and
tests/pipeline/test_scan.py checks the two agree). A leaf: it imports nothing of the project.
"""

from __future__ import annotations

# the rank tags SGLang prints in its header ('DP0 TP1', 'ATTN_CP0', ...)
SGLANG_TAG_NAMES = "DP|PP|ATTN_CP|MOE_DP|TP|EP"


def sglang_header(fast: bool = False, one_line: bool = False) -> str:
    """SGLang's default header ``[YYYY-MM-DD HH:MM:SS(.mmm) TAGS] ``, with the groups ymdhm, sec,
    ms (None when absent) and tags.

    ``fast``: written the way the regex engine runs fastest (a third of a sample's match cost was
    the header): ASCII digits one by one rather than ``\\d{4}``, the optional milliseconds as an
    alternative; on an ASCII header it matches the same text with the same groups, and a header
    with other Unicode digits (which ``\\d`` accepts) is left to the generic path.
    ``one_line``: the tags never span a newline (a pattern run over a block of lines)."""
    if fast:

        def n(k: int) -> str:
            return "[0-9]" * k

        ms = rf"(?:\.({n(3)})|)"
    else:

        def n(k: int) -> str:
            return rf"\d{{{k}}}"

        ms = rf"(?:\.({n(3)}))?"
    tags = r"([^\]\[\n]*)" if one_line else r"([^\]\[]*)"
    return rf"\[({n(4)}-{n(2)}-{n(2)} {n(2)}:{n(2)}):({n(2)}){ms}{tags}\] "


# the levels vLLM's logger prints ('INFO 08-14 08:17:30 [loggers.py:123] ...')
VLLM_LEVELS = "DEBUG|INFO|WARNING|ERROR|CRITICAL"
# the process prefix vLLM puts before its header: '(EngineCore_DP1 pid=123) ', '(Worker rank=0 pid=7, ip=...) '
VLLM_PROC = r"\((?P<proc>[A-Za-z][\w ]*?)(?: rank=\d+)? pid=\d+(?:, ip=[^)]*)?\) "
# the DP rank a vLLM process name carries
VLLM_DP = r"(?:EngineCore|Worker)_(?:DP)?(\d+)"

__all__ = ["SGLANG_TAG_NAMES", "VLLM_DP", "VLLM_LEVELS", "VLLM_PROC", "sglang_header"]
