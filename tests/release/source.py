"""The message texts of a released wheel, read from its source with ``ast`` (nothing of the engine is imported).

A *message* is the text of a format string as the source writes it, its pieces joined: implicit concatenation
(``"a " "b"``), ``+`` of literals, an f-string with its fields written ``{expr}`` (``{expr:.2f}``, ``{expr!r}``).
:func:`messages_with` finds the messages that contain an anchor (a piece of literal text), wherever they stand
(a logger call, ``raise ValueError(...)``, ``msg = f"..."``); :func:`logger_calls` lists every logger call whose
first argument is such a text. Used by ``tests/release/check.py`` (``make release-check``).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "info_once", "warning_once", "debug_once", "error_once"}
)
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hybrid-cache-exporter" / "wheels"


@dataclass(frozen=True)
class Found:
    """One message of a wheel: the file, the line of the call (or of the text), the level (a logger call's method,
    ``raise`` for an exception, ``""`` for text assigned or passed elsewhere) and its text."""

    path: str
    line: int
    level: str
    text: str


def _render(node: ast.AST) -> str | None:
    """A string expression's text: literals joined, f-string fields as ``{expr}``; None when it is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                conv = {-1: "", 115: "!s", 114: "!r", 97: "!a"}[v.conversion]
                spec = ""
                if v.format_spec is not None:
                    spec = ":" + (_render(v.format_spec) or "")
                out.append("{" + ast.unparse(v.value) + conv + spec + "}")
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _render(node.left), _render(node.right)
        return None if a is None or b is None else a + b
    return None


def _level(call: ast.Call) -> str:
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in LOG_METHODS:
        return f.attr
    return ""


class Module:
    """One source file of a wheel: its messages (parsed once)."""

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.source = source

    @cached_property
    def found(self) -> list[Found]:
        try:
            tree = ast.parse(self.source)
        except SyntaxError:
            return []
        parent: dict[int, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parent[id(child)] = node
        out: list[Found] = []
        seen: set[int] = set()
        for node in ast.walk(tree):
            if id(node) in seen or _render(node) is None or isinstance(parent.get(id(node)), ast.Expr):
                continue  # (a docstring, or a string statement, is no message)
            # the outermost string expression this piece belongs to (a piece of a '+' or of an f-string's spec is not one)
            top = node
            while id(top) in parent and _render(parent[id(top)]) is not None and not isinstance(parent[id(top)], ast.JoinedStr):
                top = parent[id(top)]
            for sub in ast.walk(top):
                seen.add(id(sub))
            up = parent.get(id(top))
            level = ""
            line = top.lineno
            if isinstance(up, ast.Call) and up.args and up.args[0] is top:
                level = _level(up) or ("raise" if isinstance(parent.get(id(up)), ast.Raise) else "")
                line = up.lineno
            out.append(Found(self.path, line, level, _render(top) or ""))
        return out


class Wheel:
    """The Python sources of a wheel (``pkg/**/*.py``), read lazily."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.names = sorted(n for n in self.zip.namelist() if n.endswith(".py"))
        self._modules: dict[str, Module] = {}

    @property
    def version(self) -> str:
        return self.path.name.split("-")[1]

    def module(self, name: str) -> Module:
        m = self._modules.get(name)
        if m is None:
            m = self._modules[name] = Module(name, self.zip.read(name).decode("utf-8", "replace"))
        return m

    def messages_with(self, anchor: str, prefer: str = "") -> list[Found]:
        """Every message that contains ``anchor`` (a piece of literal text; found in the raw source first, so it must
        not span two literals); ``prefer``'s file first."""
        names = ([prefer] if prefer in self.names else []) + [n for n in self.names if n != prefer]
        out = []
        for n in names:
            m = self.module(n)
            if anchor not in m.source:
                continue
            out += [f for f in m.found if anchor in f.text]
        return out

    def logger_calls(self) -> list[Found]:
        """Every logger call of the package whose message is a text (the first argument)."""
        out = []
        for n in self.names:
            m = self.module(n)
            if "logger" not in m.source and "log." not in m.source:
                continue
            out += [f for f in m.found if f.level and f.level != "raise"]
        return out


def newest(package: str) -> str:
    """The newest release of ``package`` on the index pip is configured with (``pip index versions``)."""
    r = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package], capture_output=True, text=True, check=True)
    # 'vllm (0.34.0)' on the first line
    head = r.stdout.strip().splitlines()[0]
    return head[head.index("(") + 1 : head.index(")")]


def download(cache: Path, package: str, version: str) -> Path:
    """The path of the wheel of ``package==version`` in ``cache``, downloaded (no dependencies) when it is not there
    (the oracle's citations check takes its wheels from here too)."""
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"{package}-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(cache), f"{package}=={version}"],
            check=True,
        )
        found = sorted(cache.glob(f"{package}-{version}-*.whl"))
    return found[0]


def wheel(cache: Path, package: str, version: str) -> Wheel:
    """The wheel of ``package==version`` from ``cache``, read (:func:`download`)."""
    return Wheel(download(cache, package, version))
