"""``replay``: read log files to the end and print the final exposition (like mtail --one_shot)."""

from __future__ import annotations

import argparse
import sys

from ..app import exposition, replay
from . import COMMANDS
from .common import add_file_args, engine_of, rules_config


def register(sub) -> None:
    r = sub.add_parser("replay", help=COMMANDS["replay"])
    add_file_args(r)
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
