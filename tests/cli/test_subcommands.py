"""The face loads a subcommand's module only when it is chosen (exporter/cli/__init__.py), and the
command line is the same as with every module loaded: --help lists all subcommands, each one's
own -h and arguments work, errors read the same."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.cli import COMMANDS, build_parser, chosen, main

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "fixtures" / "sglang" / "v0.5.10.log"
# what each subcommand loads that the others do not need
OWN = {
    "replay": ("exporter.cli.replay", "exporter.app"),
    "serve": ("exporter.cli.serve", "exporter.serve", "exporter.exposition.web", "exporter.exposition.webconfig"),
    "report": ("exporter.cli.report", "exporter.presentation.render", "exporter.presentation.report"),
    "plan": ("exporter.cli.plan", "exporter.advice.plan"),
}


def at_exit(tmp_path: Path, what: str, *argv: str) -> str:
    """Run ``python -m exporter ARGV`` as a process; the value of the expression ``what`` (with
    ``gc`` and ``sys`` imported) when it exits."""
    out = tmp_path / "at_exit.txt"
    code = (
        "import atexit, gc, runpy, sys\n"
        f"atexit.register(lambda: open({str(out)!r}, 'w').write(str({what})))\n"
        f"sys.argv = ['hybrid-cache-exporter', *{list(argv)!r}]\n"
        "runpy.run_module('exporter', run_name='__main__')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return out.read_text()


def imported(tmp_path: Path, *argv: str) -> set[str]:
    """Modules loaded when ``python -m exporter ARGV`` exits (``-X importtime`` would not list the
    subcommand's module: importlib.import_module bypasses its hook)."""
    return set(at_exit(tmp_path, "'\\n'.join(sys.modules)", *argv).split())


def test_the_table_is_the_subcommands():
    assert list(COMMANDS) == ["replay", "serve", "report", "plan"]
    assert set(OWN) == set(COMMANDS)


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["replay", "x.log"], ["replay"]),
        (["--version"], []),
        (["-h"], []),
        ([], []),
        (["serve", "--log", "replay"], ["serve"]),
        (["--version", "plan"], ["plan"]),
        (["bogus", "replay"], []),
        (["report", "-h"], ["report"]),
    ],
)
def test_chosen_is_the_first_argument_that_is_not_an_option(argv, want):
    assert chosen(argv) == want


def test_replay_loads_only_what_replay_needs(tmp_path):
    mods = imported(tmp_path, "replay", str(LOG))
    assert set(OWN["replay"]) <= mods
    others = {m for name, own in OWN.items() if name != "replay" for m in own}
    assert not others & mods, f"replay loaded {sorted(others & mods)}"


def test_version_loads_no_subcommand(tmp_path):
    mods = imported(tmp_path, "--version")
    assert not {m for own in OWN.values() for m in own} & mods


def test_top_level_help_is_the_same_without_the_modules(capsys):
    full = build_parser().format_help()
    assert build_parser([]).format_help() == full
    for name, help_ in COMMANDS.items():
        assert name in full and help_.split()[0] in full
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and capsys.readouterr().out == full


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_subcommand_help_is_its_own(name, capsys):
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: hybrid-cache-exporter {name} ")
    sub = next(a for a in build_parser()._subparsers._group_actions).choices[name]
    assert out == sub.format_help()


def test_errors_read_as_with_every_module_loaded(capsys):
    for argv in ([], ["bogus"], ["replay"], ["plan"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        err = capsys.readouterr().err
        with pytest.raises(SystemExit) as e_full:
            build_parser().parse_args(argv)
        assert e.value.code == e_full.value.code == 2
        assert capsys.readouterr().err == err, argv


def test_the_command_loads_its_modules_without_the_gc_and_freezes_them(tmp_path):
    """As a process (``argv`` None) main() leaves the collector on, with the loaded modules' objects
    frozen out of it; called with arguments (tests, embedding) it changes nothing of the GC."""
    enabled, frozen = at_exit(tmp_path, "f'{gc.isenabled()} {gc.get_freeze_count()}'", "replay", str(LOG)).split()
    assert enabled == "True" and int(frozen) > 10_000
    before = gc.get_freeze_count()
    with pytest.raises(SystemExit):
        main(["--version"])
    assert gc.isenabled() and gc.get_freeze_count() == before
