"""Which names are rotated generations of a log (exporter/sources/generations.py), as the rotating
tools write them. One table: a name, and the log it belongs to (or none)."""

from __future__ import annotations

import pytest

from exporter.sources.generations import rotation_parents

NAMES = [
    ("server.log.1", "server.log"),  # logrotate rotate N
    ("server.log.2.gz", "server.log"),  # compress
    ("server.log-20260814", "server.log"),  # dateext
    ("server.log-20260814.gz", "server.log"),
    ("server.log-1764759600.gz", "server.log"),  # dateformat -%s
    ("server.1.log", "server.log"),  # extension .log
    ("server-20260814.log.gz", "server.log"),
    # logrotate `create` finding the path taken (a writer reopened it between logrotate's rename and
    # its create): it moves that file aside as <name>-YYYYMMDDHH.backup, a generation with lines of
    # its own (tests/sources/test_logrotate_late.py::test_late_look_compressed_generations counts it)
    ("server.log-2026120311.backup", "server.log"),
    ("0.log.20260814-101010", "0.log"),  # kubelet
    ("server.log.swp", None),
    ("server.logs", None),
    ("other.log.1", None),
]


@pytest.mark.parametrize(("name", "parent"), NAMES, ids=[n for n, _ in NAMES])
def test_rotated_names(name, parent):
    parents = rotation_parents(name)
    if parent is None:
        assert "server.log" not in parents
    else:
        assert parent in parents
