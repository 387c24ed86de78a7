"""Command line: ``hybrid-cache-exporter {replay,serve,report,plan}``.

The face only: argument parsing, checks of the arguments, printing and exit codes. Each
subcommand is a module here that adds itself with ``register(subparsers)``; its handler turns
the arguments into plain values, calls the composition root (``exporter/app.py``,
``exporter/serve.py``) or a pure module, prints, and returns the process exit code. No module
of the project imports this package.
"""

from __future__ import annotations

import argparse

from . import plan, replay, report, serve
from .common import VersionAction


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hybrid-cache-exporter",
        description="Prometheus exporter for the KV and mamba-state pools of hybrid models on SGLang and vLLM, read from their logs.",
    )
    p.add_argument("--version", action=VersionAction, help="print the version, revision and Python, and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for mod in (replay, serve, report, plan):
        mod.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
