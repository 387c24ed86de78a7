"""``serve``: tail log files (or stdin) next to an SGLang/vLLM server and serve /metrics.

docs/serve.md documents the flags, the endpoints, the sidecar pattern and the failure semantics.
This module checks the flags and runs :class:`exporter.serve.Service` until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading

from .. import DEFAULT_PORT
from ..lines import DEFAULT_MAX_LINE
from ..reading import source_name
from .common import add_pipeline_args, engine_of, rules_config

log = logging.getLogger("hybrid_cache_exporter")

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")


def parse_log_spec(arg: str) -> tuple[str | None, str]:
    """``PATH`` or ``NAME=PATH`` (``NAME`` becomes the ``source`` label)."""
    if "=" in arg and not os.path.exists(arg):
        name, path = arg.split("=", 1)
        if NAME_RE.match(name) and path:
            return name, path
    return None, arg


def register(sub) -> None:
    p = sub.add_parser(
        "serve",
        help="tail log files or stdin and serve /metrics (sidecar mode)",
        description="Tail SGLang/vLLM logs and serve Prometheus metrics. See docs/serve.md.",
    )
    p.add_argument(
        "--log",
        action="append",
        required=True,
        metavar="[NAME=]PATH",
        help="log file, glob (quoted; files that appear later are picked up) or '-' for stdin; repeatable. "
        "NAME sets the source label (default: the file name without extension)",
    )
    add_pipeline_args(p)
    p.add_argument(
        "--listen", default=f":{DEFAULT_PORT}", metavar="HOST:PORT", help=f"HTTP listen address (default :{DEFAULT_PORT}, all interfaces)"
    )
    p.add_argument("--web.config.file", dest="web_config", metavar="FILE", help="exporter-toolkit web config (TLS, mTLS, basic auth)")
    p.add_argument(
        "--from-beginning", action="store_true", help="read files that exist at start from their beginning (default: from the end)"
    )
    p.add_argument("--positions", metavar="FILE", help="persist read offsets here and resume from them after a restart")
    p.add_argument(
        "--positions-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often the positions file is written (default 5; also at shutdown)",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="poll files every SECONDS instead of waiting for inotify events (for NFS, some overlay/FUSE mounts); default 0 = inotify",
    )
    p.add_argument(
        "--rotate-wait",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="keep reading a rotated/deleted file this long after its last write (default 5)",
    )
    p.add_argument(
        "--max-line-bytes", type=int, default=DEFAULT_MAX_LINE, metavar="BYTES", help="cut longer lines to this length (default 1 MiB)"
    )
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="exporter's own log level (stderr)")
    p.set_defaults(func=cmd_serve)


def _err(msg: str) -> int:
    print(f"hybrid-cache-exporter serve: {msg}", file=sys.stderr)
    return 2


def _err(msg: str) -> int:
    print(f"hybrid-cache-exporter serve: {msg}", file=sys.stderr)
    return 2


def cmd_serve(args: argparse.Namespace) -> int:
    # the tailers and the web server load here, not when `replay` builds the argument parser
    # (startup time of every replay: watchdog, bcrypt, yaml)
    from ..serve import ServeConfig, Service
    from ..web import WebConfigError, load_web_config, parse_listen

    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()), format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    try:
        parse_listen(args.listen)
    except ValueError as e:
        return _err(str(e))
    for flag in ("poll_interval", "positions_interval", "rotate_wait"):
        if getattr(args, flag) < 0:
            return _err(f"--{flag.replace('_', '-')} must not be negative")
    if args.max_line_bytes < 1:
        return _err("--max-line-bytes must be positive")
    try:
        webcfg = load_web_config(args.web_config)
    except WebConfigError as e:
        return _err(str(e))

    specs = [parse_log_spec(a) for a in args.log]
    stdin_specs = [s for s in specs if s[1] == "-"]
    if len(stdin_specs) > 1:
        return _err("--log - (stdin) can be given only once")
    try:
        rules = rules_config(args)
    except (OSError, ValueError) as e:
        return _err(f"--rules-config: {e}")
    cfg = ServeConfig(
        listen=args.listen,
        files=[s for s in specs if s[1] != "-"],
        stdin_name=(stdin_specs[0][0] or source_name("-")) if stdin_specs else None,
        engine=engine_of(args),
        rules=rules,
        web=webcfg,
        from_beginning=args.from_beginning,
        positions=args.positions,
        positions_interval=args.positions_interval,
        poll_interval=args.poll_interval,
        rotate_wait=args.rotate_wait,
        max_line=args.max_line_bytes,
    )
    try:
        svc = Service(cfg)
    except OSError as e:
        print(f"hybrid-cache-exporter serve: cannot listen on {args.listen}: {e.strerror or e}", file=sys.stderr)
        return 1

    stop = threading.Event()

    def on_signal(signum, _frame) -> None:
        log.info("received %s; stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    svc.start()
    try:
        while not stop.wait(1.0):
            pass
    finally:
        svc.stop()
    return 0
