"""Python reprs as the engines print their configuration (``server_args=ServerArgs(...)``, vLLM's
``non-default args: {...}`` and engine config): where their items split, and whether a repr is
whole. One scanner for the vLLM parser's item split and the joiner's proof that a dump is cut
(``parsers/cuts.py``). A leaf of the parsers."""

from __future__ import annotations


def scan(s: str, depth0: int = 0) -> tuple[list[int], bool]:
    """The offsets of the commas between the items of ``s`` at bracket depth ``depth0`` (outside
    quotes, deeper brackets and enum reprs ``<X.Y: 1>``), and whether its brackets and quotes are
    balanced (none left open, no stray closer). Tolerant: a stray closer never makes a depth
    negative, and ``>`` only closes an enum repr (``->`` inside a value is harmless)."""
    commas: list[int] = []
    depth = 0
    angle = 0
    quote = ""
    stray = False
    i = 0
    n = len(s)
    while i < n:
        c = s[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c == "'" or c == '"':
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            if depth > 0:
                depth -= 1
            else:
                stray = True
        elif c == "<":
            if i + 1 < n and (s[i + 1].isalpha() or s[i + 1] == "_"):
                angle += 1
        elif c == ">":
            if angle > 0:
                angle -= 1
        elif c == "," and depth == depth0 and angle == 0:
            commas.append(i)
        i += 1
    return commas, depth == 0 and not quote and not stray


__all__ = ["scan"]
