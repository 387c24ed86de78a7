"""Command line: ``hybrid-cache-exporter {replay,serve,report,plan}``.

Each subcommand lives in its own module and adds itself with ``register(subparsers)``; the
handler returns the process exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest

from . import __version__
from .collector import HybridCacheCollector
from .lines import LineSplitter
from .pipeline import Pipeline
from .rules import add_rules_args, attach, configure

CHUNK = 1 << 20


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=["auto", "sglang", "vllm"],
        default="auto",
        help="engine that wrote the log (default: detect from the line headers)",
    )


def engine_of(args: argparse.Namespace) -> str | None:
    return None if args.engine == "auto" else args.engine


def source_name(path: str) -> str:
    """Default ``source`` label: the file name without directory and extension."""
    if path == "-":
        return "stdin"
    base = os.path.basename(path.rstrip("/"))
    stem = os.path.splitext(base)[0]  # 'v0.5.10.log' -> 'v0.5.10', not 'v0'
    return stem or base or path


def read_blocks(path: str, splitter: LineSplitter | None = None) -> Iterator[str]:
    """The lines of a file (or ``-`` for stdin) as blocks of text, one per large binary read, each
    line ending in ``\\n`` (a last line without one is flushed on its own at EOF)."""
    sp = splitter or LineSplitter()
    f = sys.stdin.buffer if path == "-" else open(path, "rb")  # noqa: SIM115
    try:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            text = sp.feed_text(chunk)
            if text:
                yield text
        last = sp.flush()
        if last is not None:
            yield last + "\n"
    finally:
        if f is not sys.stdin.buffer:
            f.close()


def read_chunks(path: str, splitter: LineSplitter | None = None) -> Iterator[list[str]]:
    """The lines of a file (or ``-`` for stdin), a list per large binary read."""
    for text in read_blocks(path, splitter):
        yield text[:-1].split("\n")


def read_lines(path: str) -> Iterator[str]:
    """All lines of a file (or ``-`` for stdin)."""
    for lines in read_chunks(path):
        yield from lines


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    """Options every command that reads logs shares: engine and rule thresholds."""
    add_engine_args(p)
    add_rules_args(p)


def new_pipeline(engine: str | None, args: argparse.Namespace | None = None) -> Pipeline:
    """A pipeline with the diagnosis rules attached, configured from ``--rules-config``."""
    pipe = Pipeline(engine)
    attach(pipe)
    if args is not None:
        configure(pipe, args)
    return pipe


def replay_files(pipe: Pipeline, paths: Iterable[str], source: str | None, err=sys.stderr) -> int:
    """Feed whole files into ``pipe``; unreadable ones are reported and skipped. Returns the
    number of files that could not be read."""
    failed = 0
    for path in paths:
        name = source or source_name(path)
        pipe.source(name)
        if path != "-" and os.path.isdir(path):
            print(f"hybrid-cache-exporter: {path}: is a directory, skipped", file=err)
            failed += 1
            continue
        try:
            feed_text = pipe.feed_text
            for text in read_blocks(path):
                feed_text(name, text)
        except OSError as e:
            print(f"hybrid-cache-exporter: {path}: cannot read: {e.strerror or e}", file=err)
            failed += 1
    return failed


def exposition(pipe: Pipeline, *extra) -> bytes:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HybridCacheCollector(pipe))
    for c in extra:
        reg.register(c)
    return generate_latest(reg)


def cmd_replay(args: argparse.Namespace) -> int:
    try:
        pipe = new_pipeline(engine_of(args), args)
    except (OSError, ValueError) as e:
        print(f"hybrid-cache-exporter: --rules-config: {e}", file=sys.stderr)
        return 2
    failed = replay_files(pipe, args.files, args.source)
    pipe.finish()  # the files are complete: their last batch lines are samples too
    sys.stdout.buffer.write(exposition(pipe))
    sys.stdout.flush()
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hybrid-cache-exporter",
        description="Prometheus exporter for the KV and mamba-state pools of hybrid models on SGLang and vLLM, read from their logs.",
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("replay", help="read log files to the end and print the final exposition (like mtail --one_shot)")
    r.add_argument("files", nargs="+", metavar="FILE", help="log files ('-' for stdin)")
    r.add_argument("--source", help="source label for all files (default: each file's stem)")
    add_pipeline_args(r)
    r.set_defaults(func=cmd_replay)

    from . import plan, report, serve  # late: they import helpers from this module

    for mod in (serve, report, plan):
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
