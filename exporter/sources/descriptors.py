"""The descriptor budget: thousands of tailed files must not run the process out of descriptors.

The soft ``RLIMIT_NOFILE`` is raised to the hard limit; beyond a budget (the limit minus a reserve
for HTTP and the positions file) the idlest files are closed and reopened by identity when they are
written again (:meth:`exporter.sources.filereader.FileReader.park` / ``unpark``).
"""

from __future__ import annotations

import contextlib

from .filereader import FileReader

FD_RESERVE = 64  # descriptors kept free for HTTP probes, the positions file, listings


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard one; return the soft limit now in force."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        if soft != resource.RLIM_INFINITY and soft < target:
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))  # the hard limit stays as it was
                soft = target
        return int(soft if soft != resource.RLIM_INFINITY else 1 << 20)
    except Exception:  # pragma: no cover - platform without resource limits
        return 1024


def budget(soft: int) -> int:
    """Descriptors the tailed files may hold under the soft limit ``soft``."""
    return max(16, soft - FD_RESERVE - soft // 16)


def park_idlest(readers: list[FileReader], open_fds: int, target: int) -> None:
    """Close the descriptors of the idlest open ``readers`` until ``open_fds`` is down to
    ``target`` (their buffers and partial lines are kept)."""
    for r in sorted((r for r in readers if r.fd >= 0), key=lambda r: r.last_data):
        if open_fds <= target:
            break
        r.park()
        open_fds -= 1
