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

from parsers import events as ev

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


# --------------------------------------------------------------------------------------------
# the release an SGLang log proves (SGLang prints no version line): its formats and keys


# server_args keys that exist only from / until a release (docs/formats/sglang.md#server_args, #flags)
_SGL_KEY_FLOOR = (
    ("mamba_track_interval", "0.5.7"),
    ("mamba_backend", "0.5.9"),
    ("linear_attn_backend", "0.5.10"),
    ("mamba_radix_cache_strategy", "0.5.14"),
    ("enable_int8_mamba_checkpoint", "0.5.14"),
    ("enable_unified_memory", "0.5.15"),
    ("enable_linear_replayssm", "0.5.15"),
    ("enable_linear_replayssm_spec", "0.5.17"),
    ("mamba_max_states_per_path", "0.5.17"),
)


def sglang_features(vr: VersionRange, e: object, raw: str) -> None:
    """Narrow the SGLang release range from one event and its raw line."""
    if isinstance(e, ev.ServerConfig) and e.kind == "server_args":
        if "server_args={" in raw:
            vr.raise_floor("0.5.19", "server_args printed as a dict")
        elif "server_args=ServerArgs(" in raw:
            vr.lower_ceiling("0.5.18", "server_args printed as ServerArgs(...)")
        for key, v in _SGL_KEY_FLOOR:
            if key in e.args:
                vr.raise_floor(v, f"server_args has {key}")
        if "mamba_scheduler_strategy" in e.args and "mamba_radix_cache_strategy" not in e.args:
            vr.raise_floor("0.5.7", "server_args has mamba_scheduler_strategy")
            vr.lower_ceiling("0.5.13", "mamba_scheduler_strategy without mamba_radix_cache_strategy")
    elif isinstance(e, ev.MambaCap):
        if "state slots per request" in raw:
            vr.raise_floor("0.5.17", "'max_running_requests is capped ... by the mamba state cache'")
    elif isinstance(e, ev.KVCacheAllocated):
        if e.upper_bound:
            vr.raise_floor("0.5.18", "'KV Cache VA upper bound'")
        elif e.dtype:
            vr.raise_floor("0.5.13", "KV Cache line carries dtype")
    elif isinstance(e, ev.MambaCacheAllocated):
        if e.slots is not None:
            vr.raise_floor("0.5.3.post3", "Mamba Cache line carries max_mamba_cache_size")
    elif isinstance(e, ev.WeightsLoaded):
        if "elapsed=" in raw:
            if "dtype=" in raw:
                vr.raise_floor("0.5.9", "'Load weight end. elapsed=' with dtype")
                vr.lower_ceiling("0.5.9", "'Load weight end. elapsed=' with dtype")
            else:
                vr.raise_floor("0.5.10", "'Load weight end. elapsed=' without dtype")
    elif isinstance(e, ev.BatchStats):
        if e.pending_tokens is not None:
            vr.raise_floor("0.5.11", "prefill line has #pending-token")
        elif e.mamba_usage is not None:
            vr.raise_floor("0.5.3.post3", "batch line has mamba usage")
    elif isinstance(e, ev.ReplaySSMBuffers):
        vr.raise_floor("0.5.15", "ReplaySSM ring buffers")
    elif isinstance(e, ev.UnifiedMemory):
        vr.raise_floor("0.5.15", "unified memory pool")
