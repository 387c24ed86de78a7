"""``replay``: read log files to the end and print the final exposition (like mtail --one_shot);
``--explain``: what each line was read as, and why (docs/formats/README.md#checking-a-format)."""

from __future__ import annotations

import argparse
import sys

from ..app import exposition, new_pipeline, replay
from ..presentation.explain import explain_files
from . import COMMANDS
from .common import add_file_args, engine_of, rules_config, set_log_clock


def register(sub) -> None:
    r = sub.add_parser("replay", help=COMMANDS["replay"])
    add_file_args(r)
    r.add_argument(
        "--explain",
        action="store_true",
        help="instead of the exposition, print what each line was read as: outcome, engine, time, rank tags, what read "
        "its header, the event and its numbers, or why it says nothing; then the totals (try it on a few lines of a log)",
    )
    r.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    set_log_clock(args)
    try:
        cfg = rules_config(args)
    except (OSError, ValueError) as e:
        print(f"hybrid-cache-exporter: --rules-config: {e}", file=sys.stderr)
        return 2
    if args.explain:
        pipe = new_pipeline(engine_of(args), cfg, args.max_dp_ranks)
        failed = explain_files(pipe, args.files, args.source, sys.stdout, sys.stderr)
        sys.stdout.flush()
        return 1 if failed else 0
    pipe, failed = replay(args.files, args.source, engine_of(args), cfg, max_dp_ranks=args.max_dp_ranks)
    sys.stdout.buffer.write(exposition(pipe))
    sys.stdout.flush()
    return 1 if failed else 0
