"""Options every command that reads logs shares (engine, rule thresholds) and their checks."""

from __future__ import annotations

import argparse

from ..rules import RulesConfig, load_config


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


def add_pipeline_args(p: argparse.ArgumentParser) -> None:
    """Options every command that reads logs shares: engine and rule thresholds."""
    add_engine_args(p)
    add_rules_args(p)


def rules_config(args: argparse.Namespace) -> RulesConfig | None:
    """The ``--rules-config`` file read (None = built-in defaults); raises OSError/ValueError."""
    path = getattr(args, "rules_config", None)
    return load_config(path) if path else None
