"""What the SGLang half replaces, checked: each reference kernel of tests/engine/sglang_cpu against a naive formula,
and the AMX probe that keeps every CPU on the plain-torch path (tests/engine/sglang_kernel_checks.py, run by SGLang's
interpreter, one fresh process per check)."""

from __future__ import annotations

import re
import subprocess

import harness as h
import pytest
import sglang_harness as sh

CHECKS_FILE = h.HERE / "sglang_kernel_checks.py"
CHECKS = sorted(re.findall(r"^def check_(\w+)\(", CHECKS_FILE.read_text(), re.M))


def test_the_checks_are_found():
    assert {
        "causal_conv1d_fn",
        "chunk_gated_delta_rule",
        "mamba_chunk_scan_combined",
        "selective_state_update",
        "mamba2_mixer_takes_the_references",
        "amx_probe_fails_even_on_an_amx_cpu",
    } <= set(CHECKS)


@pytest.mark.parametrize("name", CHECKS)
def test_reference_kernel(name):
    r = subprocess.run([sh.sglang_python(), str(CHECKS_FILE), name], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and f"ok {name}" in r.stdout.splitlines(), r.stdout + r.stderr[-3000:]
