"""The flag catalogue against the engines' own command lines (issue 21.2: switches printed as switches).

``tests/oracle/engine_flags.json`` is how SGLang 0.5.15-0.5.23 and vLLM 0.33.0-0.34.0 declare every option the exporter
names, read by ``tests/oracle/engine_argparse.py`` from the parsers the released wheels build. Checked both ways: a
catalogue switch (value "true", printed alone) is a store-true / boolean option in every release that has it, and
every option that takes no value is a switch of the catalogue; every value a recommendation can carry is one the
engine's parser accepts; no page of the documentation prints a switch with a value."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter.advice import flags
from exporter.presentation.report import flag_text

ROOT = Path(__file__).resolve().parents[2]
DECLARED = json.loads((ROOT / "tests" / "oracle" / "engine_flags.json").read_text())
SWITCH_ACTIONS = {"_StoreTrueAction", "BooleanOptionalAction", "DeprecatedStoreTrueAction"}
LATEST = {"sglang": "sglang==0.5.23", "vllm": "vllm==0.33.0"}
# the values the candidates of exporter/advice/flags.py can give (besides numbers), per flag and engine
VALUES = {
    ("--mamba-ssm-dtype", "sglang"): ("bfloat16",),
    ("--mamba-ssm-cache-dtype", "vllm"): ("bfloat16",),
    ("--kv-cache-dtype", "sglang"): ("fp8_e4m3",),
    ("--mamba-radix-cache-strategy", "sglang"): ("extra_buffer_lazy",),
    ("--attention-backend", "sglang"): ("triton",),  # what a "needs" caveat names
    ("--linear-attn-backend", "sglang"): ("triton",),
    ("--mamba-backend", "sglang"): ("triton",),
}


def _declared(flag: str, engine: str) -> dict | None:
    return DECLARED[LATEST[engine]].get(flag)


@pytest.mark.parametrize("entry", [e for e in flags.CATALOGUE if not e.flag.startswith("SGLANG_")], ids=lambda e: e.flag)
def test_every_catalogued_flag_is_the_engines_and_a_switch_exactly_when_it_takes_no_value(entry):
    for engine in entry.engines:
        d = _declared(entry.flag, engine)
        assert d is not None, f"{entry.flag}: not an option of {LATEST[engine]}"
        assert (d["action"] in SWITCH_ACTIONS) == entry.switch, (entry.flag, engine, d)
        assert (d["nargs"] == 0) == entry.switch, (entry.flag, engine, d)
    if entry.switch:
        assert flag_text(entry.flag, "true") == entry.flag  # never `--switch true`: the parsers refuse a value


def test_every_release_declares_the_switches_alike():
    for release, options in DECLARED.items():
        for e in flags.CATALOGUE:
            d = options.get(e.flag)
            if d is not None and release.split("==")[0] in e.engines:
                assert (d["nargs"] == 0) == e.switch, (release, e.flag, d)


@pytest.mark.parametrize(("flag", "engine"), sorted(VALUES))
def test_the_values_recommendations_carry_are_accepted(flag, engine):
    d = _declared(flag, engine)
    assert d is not None, flag
    for v in VALUES[(flag, engine)]:
        assert d["choices"] is None or v in d["choices"], (flag, v, d["choices"])


def test_numeric_flags_take_numbers():
    for flag, typ in (
        ("--mamba-full-memory-ratio", "float"),
        ("--max-mamba-cache-size", "int"),
        ("--schedule-conservativeness", "float"),
        ("--max-running-requests", "int"),
    ):
        assert _declared(flag, "sglang")["type"] == typ, flag
    assert _declared("--max-num-seqs", "vllm")["type"] == "int"
    assert _declared("--gpu-memory-utilization", "vllm")["type"] == "float"


def test_no_page_prints_a_switch_with_a_value():
    switches = [e.flag for e in flags.CATALOGUE if e.switch]
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "dashboards" / "alerts.yml"]
    bad = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for s in switches:
            bad += [f"{page.relative_to(ROOT)}: {m.group(0)}" for m in re.finditer(rf"{re.escape(s)}[ =](?:true|false|1)\b", text)]
    assert not bad, bad
