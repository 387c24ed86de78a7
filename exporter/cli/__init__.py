"""Command line: ``hybrid-cache-exporter {replay,serve,report,plan}``.

The face only: argument parsing, checks of the arguments, printing and exit codes. Each
subcommand is a module here, named after it, that adds itself with ``register(subparsers)``; its
handler turns the arguments into plain values, calls the composition root (``exporter/app.py``,
``exporter/serve.py``) or a pure module, prints, and returns the process exit code. No module
of the project imports this package.

A subcommand's module is imported only when that subcommand is chosen (:func:`main`): ``replay``,
which scripts run once per log and the benchmark times end to end against mtail, does not load
``serve``'s tailers, web server, TLS and YAML, ``report``'s renderers or ``plan``'s tables, and
``--version`` loads none of them. The others are still listed by name and help (``COMMANDS``), so
``--help`` shows them all. This table is the one import the project makes by name at run time;
tests/design/test_layers.py reads it as an import of each module (for the cycle checks) and allows
no other.
"""

from __future__ import annotations

import argparse
import difflib
import gc
import importlib
import re
import sys
from collections.abc import Collection, Sequence

from ..exposition.buildinfo import version_text

# The subcommands in --help order, with their one-line help. ``exporter/cli/<name>.py`` adds one
# (``register``) and is imported only when it is chosen: --help lists them all from here.
COMMANDS: dict[str, str] = {
    "replay": "read log files to the end and print the final exposition (like mtail --one_shot)",
    "serve": "tail log files or stdin and serve /metrics (sidecar mode)",
    "report": "post-incident report: capacity, usage distributions, binding pool, findings with evidence, recommendations",
    "plan": "capacity plan (KV/token, state/request, pool sizes, request caps, flag effects) from a config.json",
}


class VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` as is (argparse's own action re-wraps the lines)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


class Parser(argparse.ArgumentParser):
    """argparse, and a mistyped option gets the close one suggested (``--kv-budgte: did you mean --kv-budget?``),
    on every subcommand: their parsers are of this class too (``add_subparsers`` makes them so)."""

    def error(self, message: str):  # noqa: D102 - argparse's
        m = re.match(r"unrecognized arguments: (.*)", message)
        if m:
            known = sorted(self._options())
            hints = []
            for tok in m.group(1).split():
                if tok.startswith("-"):
                    name = tok.split("=", 1)[0]
                    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
                    if close:
                        hints.append(f"{name}: did you mean {close[0]}?")
            if hints:
                message += " (" + "; ".join(hints) + ")"
        super().error(message)

    def _options(self) -> set[str]:
        """The option strings of this parser and of its subcommands' (those whose arguments were added)."""
        out: set[str] = set()
        for a in self._actions:
            out.update(o for o in a.option_strings if o.startswith("--"))
            if isinstance(a, argparse._SubParsersAction):
                for sub in a.choices.values():
                    out |= sub._options() if isinstance(sub, Parser) else set()
        return out


def build_parser(commands: Collection[str] = tuple(COMMANDS)) -> argparse.ArgumentParser:
    """The command line. The subcommands in ``commands`` get their arguments (their module is
    imported); the others are listed by name and help only, which is all that ``--help`` and the
    parse of another subcommand need."""
    p = Parser(
        prog="hybrid-cache-exporter",
        description="Prometheus exporter for the KV and mamba-state pools of hybrid models on SGLang and vLLM, read from their logs.",
    )
    p.add_argument("--version", action=VersionAction, help="print the version, revision and Python, and exit")
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in COMMANDS.items():
        if name in commands:
            importlib.import_module(f"{__name__}.{name}").register(sub)
        else:
            sub.add_parser(name, help=help_)
    return p


def chosen(argv: Sequence[str]) -> list[str]:
    """The subcommand named in ``argv`` (none: empty): the first argument that is not an option,
    since the top level's options (``-h``, ``--version``) take no value."""
    for a in argv:
        if not a.startswith("-"):
            return [a] if a in COMMANDS else []
    return []


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv``; None: this process is the command (the console script,
    ``python -m exporter``), which arguments from ``sys.argv`` and a start-up without the cyclic GC.

    The ~40 modules a subcommand loads make ~40k objects that live until the process exits. While
    they load, the collector would walk the young ones ~50 times (~13 ms), and at exit the
    interpreter's final collections walk them all again (~5 ms each): the collector is off while
    they load and they are then frozen out of its generations (``gc.freeze``; it goes on with the
    objects made after, so ``serve``'s own garbage is collected as before). That costs ~0.7 MiB
    (the few hundred cycles made while loading are kept) and saves ~20 ms of every ``replay``.
    """
    if argv is not None:
        return _run(build_parser(chosen(argv)).parse_args(argv))
    argv = sys.argv[1:]
    gc.disable()
    try:
        parser = build_parser(chosen(argv))
    finally:
        gc.enable()
    gc.freeze()
    return _run(parser.parse_args(argv))


def _run(args: argparse.Namespace) -> int:
    """The chosen subcommand's handler; its exit code."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
