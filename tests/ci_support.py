"""What a test needs from the machine (a Debian tool, a tmpfs mount, a zone file): where it is
missing, a developer's run skips the test with the reason, and CI (CI=true, as ``.ci/run`` runs)
fails it, so a tool that went missing in CI never passes as a silent skip.

``need(ok, why)`` inside a test or fixture; ``needs(ok, why)`` as a mark (tests/conftest.py
applies it at set-up)."""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def need(ok: bool, why: str) -> None:
    if not ok:
        if IN_CI:
            pytest.fail(f"{why} (required in CI: make tools / .ci/run installs it)", pytrace=False)
        pytest.skip(why)


def needs(ok: bool, why: str) -> pytest.MarkDecorator:
    return pytest.mark.needs(bool(ok), why)
