"""Options every command that reads logs shares (engine, rule thresholds) and their checks."""

from __future__ import annotations

import argparse
import os

from parsers import clock

from ..catalogues.contract import DP_RANK_LIMIT_LINES
from ..diagnosis.rules import RulesConfig, load_config
from ..state.store import DEFAULT_MAX_DP_RANKS


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        choices=["auto", "sglang", "vllm"],
        default="auto",
        help="engine that wrote the log (default: detect from the line headers)",
    )


def engine_of(args: argparse.Namespace) -> str | None:
    return None if args.engine == "auto" else args.engine


def add_rules_args(parser: argparse.ArgumentParser) -> None:
    """``--rules-config FILE`` for replay / serve / report."""
    parser.add_argument(
        "--rules-config",
        metavar="FILE",
        default=None,
        help="YAML file with rule thresholds and windows (see docs/rules.md); default: built-in defaults",
    )


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return v


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    """Options every command that reads logs shares: engine, rule thresholds, the dp_rank bound,
    the zone and the year of the logs' times."""
    add_engine_args(p)
    add_rules_args(p)
    add_timezone_args(p)
    add_year_args(p)
    p.add_argument(
        "--max-dp-ranks",
        type=_positive_int,
        default=DEFAULT_MAX_DP_RANKS,
        metavar="N",
        help=f"distinct dp_rank label values kept per source (default {DEFAULT_MAX_DP_RANKS}); lines of further ranks are "
        f"counted in {DP_RANK_LIMIT_LINES.name} and dropped (docs/reading.md)",
    )


def _checked(check):
    """An argparse ``type`` that keeps the text and refuses what ``check`` raises ValueError for, with its message."""

    def parse(s: str) -> str:
        try:
            check(s)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return s

    return parse


_zone = _checked(clock.zone_of)
_year = _checked(clock.year_of)


def add_timezone_args(p: argparse.ArgumentParser) -> None:
    """``--log.timezone``: the zone the logs' zone-less times are read in (docs/formats/README.md#time)."""
    p.add_argument(
        "--log.timezone",
        dest="log_timezone",
        type=_zone,
        default=clock.LOCAL,
        metavar="ZONE",
        help="time zone of the times the logs write without one (SGLang's and vLLM's headers, asctime): 'local' "
        "(default: this process's zone, TZ), UTC, an IANA name (Europe/Berlin) or +HH:MM; times with a zone are "
        "exact anyway (docs/formats/README.md#time)",
    )


def add_year_args(p: argparse.ArgumentParser) -> None:
    """``--log.year``: the year of the times the logs write without one (docs/serve.md#the-vllm-year)."""
    default = os.environ.get(clock.YEAR_ENV) or clock.FROM_FILE
    p.add_argument(
        "--log.year",
        dest="log_year",
        type=_year,
        default=default,  # a string: argparse checks it with the type, $HCE_LOG_YEAR too
        metavar="YEAR",
        help="year of the first times the logs write without one (vLLM's MM-DD headers): 'file' (default: from the "
        f"file's modification time and first line; ${clock.YEAR_ENV} when set) or a year such as 2026; a log that "
        "passes 31 December moves to the next year as it does (docs/serve.md#the-vllm-year)",
    )


def set_log_clock(args: argparse.Namespace) -> None:
    """Read the logs' zone-less times in the zone ``--log.timezone`` names, and date their year-less
    times in the year ``--log.year`` names, from now on."""
    clock.set_zone(getattr(args, "log_timezone", clock.LOCAL))
    clock.set_year(getattr(args, "log_year", clock.FROM_FILE))


def add_file_args(p: argparse.ArgumentParser) -> None:
    """The complete log files of ``replay`` and ``report``, their source label and the pipeline options."""
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


def rules_config(args: argparse.Namespace) -> RulesConfig | None:
    """The ``--rules-config`` file read (None = built-in defaults); raises OSError/ValueError."""
    path = getattr(args, "rules_config", None)
    return load_config(path) if path else None
