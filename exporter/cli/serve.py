"""``serve``: tail log files (or stdin) next to an SGLang/vLLM server and serve /metrics.

docs/serve.md documents the flags, the endpoints, the sidecar pattern and the failure semantics.
This module checks the flags and runs :class:`exporter.serve.Service` until SIGTERM, SIGINT or
SIGQUIT, handling SIGHUP, SIGUSR1 and SIGUSR2 meanwhile (``SIGNALS``; docs/serve.md, "Signals").
"""

from __future__ import annotations

import argparse
import collections
import faulthandler
import logging
import os
import re
import signal
import sys
import threading

from .. import DEFAULT_PORT
from ..exposition.identity import parse_labels
from ..exposition.web import check_telemetry_path, resolve_listen
from ..exposition.webconfig import ReloadingWebConfig, WebConfigError
from ..logsetup import FORMATS, LEVELS
from ..logsetup import configure as configure_logging
from ..reading.lines import DEFAULT_MAX_LINE
from ..reading.reader import source_name
from ..serve import ServeConfig, Service
from . import COMMANDS, VersionAction
from .common import add_pipeline_args, engine_of, rules_config, set_log_clock

log = logging.getLogger("hybrid_cache_exporter")

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")
# --log '/var/log/pods/*/*/*.log' is the kubelet's layout: DaemonSet mode on that directory
KUBELET_GLOB = re.compile(r"^(/(?:.*/)?pods)/\*/\*/\*\.log$")


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
        help=COMMANDS["serve"],
        description="Tail SGLang/vLLM logs and serve Prometheus metrics. See docs/serve.md.",
    )
    p.add_argument(
        "--log",
        action="append",
        default=[],
        metavar="[NAME=]PATH",
        help="log file, glob (quoted; files that appear later are picked up) or '-' for stdin; repeatable. "
        "NAME sets the source label (default: the file name without extension). Required unless --kubernetes-pods",
    )
    add_pipeline_args(p)
    p.add_argument("--version", action=VersionAction, help="print the version, revision and Python, and exit")
    web = p.add_argument_group("web (the Prometheus exporter conventions; docs/fleet.md)")
    web.add_argument(
        "--web.listen-address",
        "--listen",
        dest="listen",
        action="append",
        default=None,
        metavar="HOST:PORT",
        help=f"address to serve on; repeatable. ':PORT' and '[::]:PORT' are every interface, IPv4 and IPv6; "
        f"'[::1]:PORT' an IPv6 address; '0.0.0.0:PORT' IPv4 only (default :{DEFAULT_PORT})",
    )
    web.add_argument(
        "--web.telemetry-path", dest="telemetry_path", default="/metrics", metavar="PATH", help="path of the metrics (default /metrics)"
    )
    web.add_argument(
        "--web.config.file",
        dest="web_config",
        metavar="FILE",
        help="exporter-toolkit web config (TLS, mTLS, basic auth); re-read when it or its certificates change",
    )
    web.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="add this label to every series (repeatable), e.g. --label cluster=eu1 on VMs; on Kubernetes prefer target labels",
    )
    web.add_argument(
        "--log.level",
        "--log-level",
        dest="log_level",
        default="info",
        type=str.lower,
        choices=sorted(LEVELS),
        help="the exporter's own log level (stderr; default info)",
    )
    web.add_argument(
        "--log.format",
        dest="log_format",
        default="logfmt",
        type=str.lower,
        choices=FORMATS,
        help="the exporter's own log format (default logfmt)",
    )
    k8s = p.add_argument_group("DaemonSet mode (docs/fleet.md)")
    k8s.add_argument(
        "--kubernetes-pods",
        metavar="DIR",
        help="read the container logs under the kubelet's DIR (/var/log/pods) and label them namespace, pod, container",
    )
    k8s.add_argument(
        "--kubernetes-include",
        metavar="REGEX",
        help="read only containers whose 'namespace/pod/container' matches (e.g. '^inference/.*/sglang$'); default all",
    )
    k8s.add_argument(
        "--kubernetes-max-sources",
        type=int,
        default=100,
        metavar="N",
        help="read at most N containers; the rest are counted, not read (default 100)",
    )
    k8s.add_argument(
        "--kubernetes-forget-after",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="drop a pod's series this long after its logs are gone (default 600)",
    )
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
    p.add_argument(
        "--source-missing-after",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a --log path still absent after this long is a WARNING, a self-metric and not ready (default 60)",
    )
    p.set_defaults(func=cmd_serve)


def _err(msg: str) -> int:
    print(f"hybrid-cache-exporter serve: {msg}", file=sys.stderr)
    return 2


def cmd_serve(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    signals = Signals()  # from here on no signal kills the process without its positions
    set_log_clock(args)
    kubelet = [a for a in args.log if KUBELET_GLOB.match(a)]
    if kubelet and not args.kubernetes_pods:
        args.kubernetes_pods = KUBELET_GLOB.match(kubelet[0]).group(1)
        args.log = [a for a in args.log if a not in kubelet]
        log.info("--log %s is the kubelet's layout: reading it as --kubernetes-pods %s", kubelet[0], args.kubernetes_pods)
    listens = args.listen or [f":{DEFAULT_PORT}"]
    try:
        for a in listens:
            resolve_listen(a)
        check_telemetry_path(args.telemetry_path)
        labels = parse_labels(args.label, kubernetes=bool(args.kubernetes_pods))
        if args.kubernetes_include:
            re.compile(args.kubernetes_include)
    except (ValueError, re.error) as e:
        return _err(str(e))
    if not args.log and not args.kubernetes_pods:
        return _err("give at least one --log (or --kubernetes-pods DIR)")
    for flag in ("poll_interval", "positions_interval", "rotate_wait", "source_missing_after", "kubernetes_forget_after"):
        if getattr(args, flag) < 0:
            return _err(f"--{flag.replace('_', '-')} must not be negative")
    if args.max_line_bytes < 1:
        return _err("--max-line-bytes must be positive")
    if args.kubernetes_max_sources < 1:
        return _err("--kubernetes-max-sources must be positive")
    if args.kubernetes_pods and not os.path.isdir(args.kubernetes_pods):
        return _err(f"--kubernetes-pods {args.kubernetes_pods}: not a directory (mount the node's /var/log/pods there)")
    try:
        webcfg = ReloadingWebConfig(args.web_config)
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
        listen=listens,
        files=[s for s in specs if s[1] != "-"],
        stdin_name=(stdin_specs[0][0] or source_name("-")) if stdin_specs else None,
        engine=engine_of(args),
        rules=rules,
        web=webcfg,
        telemetry_path=args.telemetry_path,
        labels=labels,
        source_missing_after=args.source_missing_after,
        kubernetes_pods=args.kubernetes_pods,
        kubernetes_max_sources=args.kubernetes_max_sources,
        kubernetes_forget_after=args.kubernetes_forget_after,
        kubernetes_include=args.kubernetes_include,
        from_beginning=args.from_beginning,
        positions=args.positions,
        positions_interval=args.positions_interval,
        poll_interval=args.poll_interval,
        rotate_wait=args.rotate_wait,
        max_line=args.max_line_bytes,
        max_dp_ranks=args.max_dp_ranks,
    )
    try:
        svc = Service(cfg)
    except (OSError, ValueError) as e:
        print(f"hybrid-cache-exporter serve: cannot listen on {', '.join(listens)}: {getattr(e, 'strerror', None) or e}", file=sys.stderr)
        return 1

    svc.start()
    try:
        serve_until_stopped(svc, signals)
    finally:
        svc.stop()
    return 0


# what each signal does (docs/serve.md, "Signals"); every one is handled in the main thread, and
# none loses the lines read since the last positions write
SIGNALS = {
    "SIGTERM": "stop: write the positions, exit 0",
    "SIGINT": "stop: write the positions, exit 0",
    "SIGQUIT": "the stack of every thread to stderr, then stop: write the positions, exit 0",
    "SIGHUP": "re-read the web config (TLS, basic auth) and write the positions; go on",
    "SIGUSR1": "write the positions and log each source's state (offset, lag, open files); go on",
    "SIGUSR2": "the stack of every thread to stderr (a stall); go on",
}


class Signals:
    """Signals caught from the start of ``serve`` (before the service is built), acted on by the
    main loop: a handler only queues and wakes."""

    def __init__(self) -> None:
        self.pending: collections.deque[int] = collections.deque()
        self.wake = threading.Event()
        for name in SIGNALS:
            signal.signal(getattr(signal, name), self._on)

    def _on(self, signum, _frame) -> None:
        self.pending.append(signum)
        self.wake.set()


def serve_until_stopped(svc: Service, signals: Signals) -> None:
    while True:
        signals.wake.wait(1.0)
        signals.wake.clear()
        while signals.pending:
            sig = signal.Signals(signals.pending.popleft())
            log.info("received %s: %s", sig.name, SIGNALS[sig.name])
            if sig in (signal.SIGQUIT, signal.SIGUSR2):
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
                return
            if sig == signal.SIGHUP and svc.web is not None:
                svc.web.reload()
            if sig == signal.SIGUSR1:
                for row in svc.rows():
                    log.info("source %s", " ".join(f"{k}={v}" for k, v in row.items()))
            svc.manager.request_save()
