"""Engine releases: one parser, one formatter, one range of what a log proves.

Every release gate in the exporter (the SGLang slots table, vLLM's release table, the recommendation gates,
the release inference from log formats) goes through :func:`parse_version`: ``"0.5.3.post3"`` ->
``(0, 5, 3, 3)``, ``"v0.5.19rc1"`` -> ``(0, 5, 19, 0)``, ``None``/garbage -> ``None``. Code that needs a value
(the capacity model's defaults, a user's ``--sglang-version``) calls :func:`require_version`, which raises
``ValueError`` on garbage instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

Version = tuple[int, int, int, int]

_RE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?post(\d+))?")


@lru_cache(maxsize=256)
def _parse(v: str) -> Version | None:
    m = _RE.match(v.strip())
    if not m:
        return None
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0), int(m.group(4) or 0))


def parse_version(v: str | tuple[int, ...] | None) -> Version | None:
    """A release as a 4-tuple; a tuple is padded with zeros; ``None`` or an unparseable string -> ``None``."""
    if v is None or v == "":
        return None
    if isinstance(v, tuple):
        return (tuple(v) + (0, 0, 0, 0))[:4]  # type: ignore[return-value]
    return _parse(str(v))


def require_version(v: str | tuple[int, ...] | None, default: Version) -> Version:
    """:func:`parse_version`, ``default`` for ``None``; raises ``ValueError`` for a string that is no release."""
    if v is None:
        return default
    pv = parse_version(v)
    if pv is None:
        raise ValueError(f"unparseable version {v!r}")
    return pv


@lru_cache(maxsize=256)
def fmt_version(v: tuple[int, ...] | None) -> str:
    if v is None:
        return "?"
    s = f"{v[0]}.{v[1]}.{v[2]}"
    return s + (f".post{v[3]}" if len(v) > 3 and v[3] else "")


@dataclass
class VersionRange:
    """What the log tells about the engine release: a floor and a ceiling (inclusive), either may
    be unknown. vLLM prints its version; SGLang does not, so its range is inferred from format
    features (see docs/rules.md, "Release detection")."""

    floor: tuple[int, ...] | None = None
    ceiling: tuple[int, ...] | None = None
    exact: bool = False
    reasons: list[str] = field(default_factory=list)

    def at_least(self, v: str) -> bool:
        """True only when the log proves the release is >= v."""
        pv = parse_version(v)
        return self.floor is not None and pv is not None and self.floor >= pv

    def below(self, v: str) -> bool:
        """True only when the log proves the release is < v."""
        pv = parse_version(v)
        return self.ceiling is not None and pv is not None and self.ceiling < pv

    def may_be_in(self, lo: str, hi: str) -> bool:
        """True unless the log proves the release is outside [lo, hi]."""
        plo, phi = parse_version(lo), parse_version(hi)
        if self.ceiling is not None and plo is not None and self.ceiling < plo:
            return False
        return not (self.floor is not None and phi is not None and self.floor > phi)

    def raise_floor(self, v: str, why: str) -> None:
        pv = parse_version(v)
        if pv is not None and (self.floor is None or pv > self.floor):
            self.floor = pv
            self.reasons.append(f">={v}: {why}")

    def lower_ceiling(self, v: str, why: str) -> None:
        pv = parse_version(v)
        if pv is not None and (self.ceiling is None or pv < self.ceiling):
            self.ceiling = pv
            self.reasons.append(f"<={v}: {why}")

    def __str__(self) -> str:
        if self.exact or (self.floor is not None and self.floor == self.ceiling):
            return fmt_version(self.floor)
        if self.floor is None and self.ceiling is None:
            return "unknown"
        if self.ceiling is None:
            return ">=" + fmt_version(self.floor)
        if self.floor is None:
            return "<=" + fmt_version(self.ceiling)
        return f"{fmt_version(self.floor)}..{fmt_version(self.ceiling)}"
