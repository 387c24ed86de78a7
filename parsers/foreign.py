"""Lines other writers put into a server's log, told by their own shapes.

A server's stderr is shared: between its own lines stand tqdm progress bars (weight shards, CUDA
graph capture, hub downloads), Python warnings with the source line Python prints after them,
NCCL, Gloo and torch's own chatter, absl's notice. None is an engine's message, and none is the
rest of one: the joiner (``exporter/state/wrapped.py``) never takes such a line for a continuation, and
a line it holds stays held across them (docs/formats/README.md#lines-as-users-paste-them).

The shapes are the writers' own, read in their code and logs (tqdm's ``format_meter``, the
``warnings`` module's ``formatwarning``, NCCL's ``host:pid:tid [dev] NCCL INFO``, c10's
``[W1104 10:12:44.361437153 file.cpp:N]``); ``tests/noise_support.py`` holds real lines of each.
A line with vLLM's process prefix (which its stdout wrapper put before every output line up to
0.30) is read without it. Pure functions, a leaf of the parsers.
"""

from __future__ import annotations

import re

from .headers import VLLM_PROC

_PROC_RE = re.compile(VLLM_PROC)
_WARNING = r"\S+\.py:\d+: \w*Warning: "  # the warnings module: '<file>.py:<line>: <Category>Warning: <message>'

FOREIGN_RE = re.compile(
    "(?:"
    + "|".join(
        (
            # tqdm: 'NN%|<bar>| n/m [elapsed<eta, rate]', vLLM's 'NN% Completed | n/m [...]', and a bar without a
            # total (a hub download: 'config.json: 4.33kB [00:00, 24.6MB/s]'); the rate closes the bracket
            r".*?\d{1,3}%(?:\||\s+Completed \|)",
            r".*?\[\d+:\d\d(?::\d\d)?(?:<(?:\d+:\d\d(?::\d\d)?|\?))?, *(?:[\d.]+|\?)\s?(?:[kMGTP]?i?B|it|s)/(?:s|it)\]",
            _WARNING,
            # NCCL ('host:pid:tid [dev] NCCL INFO ...', 'NCCL version 2.21.5+cuda12.4'), Gloo, torch's c10 logger
            # ('[rank0]:[W1104 10:12:44.361437153 ProcessGroupNCCL.cpp:1496] ...', '[W1104 ...] ...')
            r"\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|ERROR|TRACE) ",
            r"NCCL version \d",
            r"\[Gloo\] ",
            r"(?:\[rank\d+\]:)?\[[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ ",
            # absl (grpc, XLA, TensorFlow) before its logging is set up
            r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR",
        )
    )
    + ")"
)
# the line Python's warnings module prints after a warning: the source line, indented
WARNING_SOURCE_RE = re.compile(r"  +\S")
_WARNING_RE = re.compile(_WARNING)


def foreign(line: str, after_warning: bool = False) -> bool:
    """Whether another writer's shape explains ``line`` (not an engine's message, nor the rest of
    one). ``after_warning``: the line before was a Python warning, so an indented line is its
    source line."""
    if after_warning and WARNING_SOURCE_RE.match(line):
        return True
    if line[:1] == "(":
        m = _PROC_RE.match(line)
        if m is not None:
            line = line[m.end() :]
    return FOREIGN_RE.match(line) is not None


def is_warning(line: str) -> bool:
    """A Python warning's first line (the next, indented line is its source line)."""
    if line[:1] == "(":
        m = _PROC_RE.match(line)
        if m is not None:
            line = line[m.end() :]
    return _WARNING_RE.match(line) is not None


__all__ = ["FOREIGN_RE", "foreign", "is_warning"]
