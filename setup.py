"""The C extension and the build revision live here; everything else is in pyproject.toml.

``exporter._scan`` is the bulk scanner of busy SGLang logs. It is optional: without a C compiler
the install still succeeds and the pure-Python scanner (exporter/state/scan.py) runs instead, slower.

``exporter/_revision.py`` is written into every sdist and wheel with the git revision they were
built from (``HCE_REVISION`` if set, as in the Dockerfile's build argument, else ``git rev-parse``;
a wheel built from an sdist keeps the sdist's), so ``--version`` and ``build_info`` name it.
"""

import os
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
REV_FILE = os.path.join("exporter", "_revision.py")


def _revision() -> str | None:
    rev = os.environ.get("HCE_REVISION", "").strip()
    if rev:
        return rev
    if os.path.exists(os.path.join(HERE, ".git")):
        try:
            out = subprocess.run(["git", "-C", HERE, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    return None


def _write(base: str, rev: str) -> None:
    path = os.path.join(base, REV_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f'"""Written at build time by setup.py."""\n\nREVISION = "{rev}"\n')


class BuildPy(build_py):
    def run(self):
        super().run()
        rev = _revision()
        if rev:
            _write(self.build_lib, rev)
        # else: an sdist's own exporter/_revision.py was copied as a module, or there is none (unknown)


class Sdist(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        rev = _revision()
        if rev:
            target = os.path.join(base_dir, REV_FILE)
            if os.path.exists(target):
                os.unlink(target)  # may be a hard link to the source tree's file
            _write(base_dir, rev)


setup(
    ext_modules=[Extension("exporter._scan", ["exporter/_scan.c"], optional=True)],
    cmdclass={"build_py": BuildPy, "sdist": Sdist},
)
