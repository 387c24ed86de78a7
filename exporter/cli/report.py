"""``report``: the post-incident report of complete log files (text, ``--json``, ``--markdown`` or ``--html``)."""

from __future__ import annotations

import argparse
import json
import sys

from ..app import replay
from ..report import build_report, render_html, render_markdown, render_text
from ..rules import load_config
from .common import add_pipeline_args, engine_of


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="post-incident report: capacity, usage distributions, binding pool, findings with evidence, recommendations",
    )
    p.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="log files ('-' for stdin); a log and its rotated generations (server.log server.log.1 server.log.2.gz ...) in any order are one source read oldest first; gzip, bzip2 and xz are read transparently; Docker json-file and CRI records are joined like serve does; a file with no SGLang or vLLM line is an error (docs/reading.md)",
    )
    p.add_argument(
        "--source", help="source label for all files (default: each log's stem, e.g. 'server' for server.log and its generations)"
    )
    add_pipeline_args(p)
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="machine-readable JSON")
    fmt.add_argument("--markdown", action="store_true", help="Markdown (for an incident ticket)")
    fmt.add_argument("--html", action="store_true", help="one self-contained HTML file with charts (opens offline, no network)")
    p.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    try:
        cfg = load_config(args.rules_config)
    except (OSError, ValueError) as e:
        print(f"hybrid-cache-exporter: --rules-config: {e}", file=sys.stderr)
        return 2
    pipe, failed = replay(args.files, args.source, engine_of(args), cfg, timelines=args.html, max_dp_ranks=args.max_dp_ranks)
    rep = build_report(pipe, cfg)
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
    return 1 if failed else 0
