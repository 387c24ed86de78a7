"""``report``: the post-incident report of complete log files (text, ``--json``, ``--markdown`` or ``--html``)."""

from __future__ import annotations

import argparse
import json
import sys

from ..app import replay, timelines
from ..diagnosis.rules import load_config
from ..presentation.render import render_html, render_markdown, render_text
from ..presentation.report import build_report
from . import COMMANDS
from .common import add_file_args, engine_of, set_log_clock


def register(subparsers) -> None:
    p = subparsers.add_parser("report", help=COMMANDS["report"])
    add_file_args(p)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable JSON")
    fmt.add_argument("--markdown", action="store_true", help="Markdown (for an incident ticket)")
    fmt.add_argument("--html", action="store_true", help="one self-contained HTML file with charts (opens offline, no network)")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    set_log_clock(args)
    try:
        cfg = load_config(args.rules_config)
    except (OSError, ValueError) as e:
        print(f"hybrid-cache-exporter: --rules-config: {e}", file=sys.stderr)
        return 2
    hist = timelines() if args.html else None
    pipe, failed = replay(args.files, args.source, engine_of(args), cfg, history=hist, max_dp_ranks=args.max_dp_ranks)
    if failed:
        # nothing on stdout: `report --html missing.log > incident.html` must not leave a report of no log behind
        print(f"hybrid-cache-exporter: report: {failed} file(s) could not be read (above); no report written", file=sys.stderr)
        return 1
    rep = build_report(pipe, cfg, hist)
    if args.json:
        text = json.dumps(rep, indent=2, default=str) + "\n"
    elif args.markdown:
        text = render_markdown(rep)
    elif args.html:
        text = render_html(rep)
    else:
        text = render_text(rep)
    sys.stdout.write(text)
    sys.stdout.flush()
    return 0
