"""What build is running: version, git revision and Python, for ``--version``, the
``hybrid_cache_exporter_build_info`` gauge, the landing page and the startup log line.

The revision is baked into ``exporter/_revision.py`` when a wheel or sdist is built (setup.py, from
``HCE_REVISION`` or ``git rev-parse``). A source checkout without that file asks git once; anything
else is ``unknown`` (never a guess).
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess

from .. import __version__

VERSION = __version__


@functools.cache
def revision() -> str:
    try:
        from .._revision import REVISION  # type: ignore[import-not-found]  # written at build time

        if REVISION:
            return str(REVISION)
    except ImportError:
        pass
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.exists(os.path.join(root, ".git")):  # a source checkout (editable install)
        try:
            out = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            pass
    return "unknown"


def python_version() -> str:
    return platform.python_version()


def labels() -> dict[str, str]:
    """Labels of ``hybrid_cache_exporter_build_info``."""
    return {"version": VERSION, "revision": revision(), "python_version": python_version()}


def version_text(prog: str = "hybrid-cache-exporter") -> str:
    """What ``--version`` prints (the layout of the Prometheus ecosystem's ``--version``)."""
    return (
        f"{prog}, version {VERSION} (revision: {revision()})\n"
        f"  python version: {python_version()} ({platform.python_implementation()})\n"
        f"  platform: {platform.system().lower()}/{platform.machine()}"
    )
