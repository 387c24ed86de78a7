"""``replay``: read log files to the end and print the final exposition (like mtail --one_shot)."""

from __future__ import annotations

import argparse
import sys

from ..app import exposition, replay
from .common import add_pipeline_args, engine_of, rules_config


def register(sub) -> None:
    r = sub.add_parser("replay", help="read log files to the end and print the final exposition (like mtail --one_shot)")
    r.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="log files ('-' for stdin); a log and its rotated generations (server.log server.log.1 server.log.2.gz ...) in any order are one source read oldest first; gzip, bzip2 and xz are read transparently; Docker json-file and CRI records are joined like serve does; a file with no SGLang or vLLM line is an error (docs/reading.md)",
    )
    r.add_argument(
        "--source", help="source label for all files (default: each log's stem, e.g. 'server' for server.log and its generations)"
    )
    add_pipeline_args(r)
    r.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    try:
        cfg = rules_config(args)
    except (OSError, ValueError) as e:
        print(f"hybrid-cache-exporter: --rules-config: {e}", file=sys.stderr)
        return 2
    pipe, failed = replay(args.files, args.source, engine_of(args), cfg, max_dp_ranks=args.max_dp_ranks)
    sys.stdout.buffer.write(exposition(pipe))
    sys.stdout.flush()
    return 1 if failed else 0
