"""The families a scrape shows, kept as rows, and their text: byte for byte prometheus_client's, without it.

A node's 10,000 sources are some 400,000 series. Built as prometheus_client's families (a
``Sample`` and a label dict per series) and encoded by its ``generate_latest`` (every series'
labels sorted, each name validated and escaped), one scrape took 22 s (docs/performance.md,
"Scrapes of many sources"). A :class:`Family` keeps each series as a row: its label values in the
contract's order and its value. Its text comes from one template per family (the label names
sorted once, the values put in) and each distinct value is formatted once per scrape.

This module imports nothing of prometheus_client: ``replay`` writes its exposition with :func:`write` and never
loads it (its import is a third of ``replay``'s start-up, which the benchmark times against mtail). ``serve``
writes through :mod:`exporter.exposition.text`, which hands every other family to prometheus_client's encoders.
:func:`go_float` is prometheus_client's ``floatToGoString``, checked against it in tests/collector/test_exposition.py.

Names, types, help and label names come from the contract (``exporter/catalogues/contract.py``): a family is
made from its entry and takes nothing else.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping

from ..catalogues import contract as C

# a name that every escaping of names prometheus_client knows leaves as it is (no ':', no dot)
_PLAIN_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


def go_float(d) -> str:
    """A sample's value as prometheus_client writes it (``utils.floatToGoString``: Go's spelling of a float)."""
    d = float(d)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to exponents sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


class NotPlain(Exception):
    """A name of a family that an escaping of names might change."""


def _escape(v: str) -> str:
    """A label value as both formats write it."""
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Family:
    """One family of the contract, its series as rows ``(label values, value)``; the label values in
    the order of the entry's ``labels`` (then its ``info_labels``).

    ``add_metric`` takes what prometheus_client's ``*MetricFamily.add_metric`` takes (an info
    family: the entry's labels, then a dict of its info labels). ``samples`` are made from the rows
    when read. :meth:`labelled` is the same rows with more labels (exporter/exposition/identity.py)."""

    def __init__(self, m: C.Metric) -> None:
        # what prometheus_client's encoders and registry read of a family (its ``Metric``): name, documentation,
        # type, unit and ``samples`` (made from the rows when read)
        self.name, self.documentation, self.type, self.unit = m.family, m.help, m.type, ""
        self.sample_name = m.name  # every sample's name: counters with _total, info with _info
        self.info = m.type == C.INFO
        self.info_keys = m.info_labels if self.info else ()
        self.label_names: tuple[str, ...] = m.labels + self.info_keys
        self.rows: list[tuple[tuple[str, ...], float]] = []
        self.const: dict[str, str] = {}  # labels on every sample (--label)
        self.per_source: Mapping[str, Mapping[str, str]] = {}  # labels by the sample's source label

    def add_metric(self, labels: Iterable[str], value) -> None:
        vals = tuple(labels)
        if self.info:
            if len(value) != len(self.info_keys):
                raise ValueError(f"{self.name}: info labels {sorted(value)}, the contract says {self.info_keys}")
            vals += tuple(value[k] for k in self.info_keys)
            value = 1
        if len(vals) != len(self.label_names):
            raise ValueError(f"{self.name}: {len(vals)} label values for {self.label_names}")
        self.rows.append((vals, value))

    def __len__(self) -> int:
        return len(self.rows)

    def labelled(self, const: Mapping[str, str], per_source: Mapping[str, Mapping[str, str]]) -> Family:
        """These rows with ``const`` labels on every sample and ``per_source[source]`` on the samples
        of that source; a label the family has is never overwritten."""
        out = Family.__new__(Family)
        out.__dict__.update(self.__dict__)
        out.const, out.per_source = dict(const), per_source
        return out

    def named(self, names: set[str]) -> bool:
        """Whether ``/metrics?name[]=`` keeps this family: asked by its name, or by its samples'
        name when it has samples (exporter/exposition/web.py's filter of any family)."""
        return self.name in names or (self.sample_name in names and bool(self.rows))

    @property
    def samples(self) -> list:
        """The rows as prometheus_client's ``Sample``s: only its encoders and filters read them (a request for an
        escaping of names, a family of a name it escapes, a label or filter of another collector), so its module is
        imported then, never by ``replay``."""
        from prometheus_client.samples import Sample

        names, name, const, per = self.label_names, self.sample_name, self.const, self.per_source
        out = []
        for vals, v in self.rows:
            labels = dict(zip(names, vals, strict=True))
            if const or per:
                extra = per.get(labels.get("source", "")) if per else None
                labels = {**const, **extra, **labels} if extra else {**const, **labels}
            out.append(Sample(name, labels, v))
        return out

    # ------------------------------------------------------------------------------------
    # the text

    def header(self, om: bool) -> str:
        doc = self.documentation.replace("\\", r"\\").replace("\n", r"\n")
        if om:
            doc = doc.replace('"', r"\"")
            return f"# HELP {self.name} {doc}\n# TYPE {self.name} {self.type}\n"
        kind = "gauge" if self.type == C.INFO else self.type
        return f"# HELP {self.sample_name} {doc}\n# TYPE {self.sample_name} {kind}\n"

    def _template(self, extra: tuple[str, ...], escape: bool) -> tuple[Callable[..., str], tuple[int, int, int]]:
        """The format of one sample line of these label names and ``extra`` per-source ones (their
        values after the row's, then the value's text), and the quotes, backslashes and newlines
        the line has of its own (with empty values). Raises :class:`NotPlain` for a name that an
        escaping might change (prometheus_client writes that family)."""
        own = self.label_names
        fields: dict[str, str] = {}
        for k, v in self.const.items():
            if k not in own:
                fields[k] = _escape(v).replace("{", "{{").replace("}", "}}")  # known: escaped here
        for j, k in enumerate(extra):
            if k not in own:
                fields[k] = f"{{{len(own) + j}}}"
        for i, k in enumerate(own):
            fields[k] = f"{{{i}}}"
        if not all(_PLAIN_NAME.match(k) for k in (self.sample_name, *fields)):
            raise NotPlain(self.sample_name)
        n = len(own) + len(extra)
        labels = ",".join(f'{k}="{fields[k]}"' for k in sorted(fields))
        text = self.sample_name + ("{{" + labels + "}}" if labels else "") + f" {{{n}}}\n"
        bare = text.format(*[""] * (n + 1))
        return text.format, (bare.count('"'), bare.count("\\"), bare.count("\n"))

    def lines(self, scrape: Scrape, escape: bool = False) -> str:
        """The sample lines.

        With ``escape`` False the label values are put in as they are and the text is checked: a
        value that needed escaping (a quote, backslash or newline) adds one of those characters
        to what the templates account for, and then the lines are made again, every value escaped."""
        numbers = scrape.numbers
        get = numbers.get

        def number(v) -> str:
            text = go_float(v)
            if v:  # not zero, whose sign is written (-0.0 == 0.0 as a key)
                numbers[v] = text
            return text

        rows = self.rows
        texts = [(get(v) if v else None) or number(v) for _, v in rows]
        fmt, marks = self._template((), escape)
        per = self.per_source
        at = self.label_names.index("source") if "source" in self.label_names else -1
        if not escape and not (per and (at >= 0 or per.get(""))):  # no labels by source on these lines
            body = "".join([fmt(*vals, t) for (vals, _), t in zip(rows, texts, strict=True)])
            want = tuple(n * len(rows) for n in marks)
        else:
            body, want = self._labelled_lines(scrape, texts, (fmt, marks), at, escape)
        if escape or (body.count('"'), body.count("\\"), body.count("\n")) == want:
            return body
        return self.lines(scrape, escape=True)

    def _labelled_lines(self, scrape: Scrape, texts: list[str], plain: tuple, at: int, escape: bool) -> tuple[str, tuple[int, int, int]]:
        """The lines with each source's labels (``at``: the index of the source label; -1: none,
        a sample without one has the labels of the source named "", as identity.Labelled gives
        them), escaped or not, and the quotes, backslashes and newlines of the templates used."""
        extras = scrape.extras(self.per_source, escape)
        templates: dict[tuple[str, ...], tuple] = {(): plain}
        esc: dict[str, str] = {}
        q = b = n = 0
        out = []
        for (vals, _), text in zip(self.rows, texts, strict=True):
            keys, extra = extras(vals[at] if at >= 0 else "")
            t = templates.get(keys)
            if t is None:
                t = templates[keys] = self._template(keys, escape)
            if escape:
                vals = tuple([esc.get(x) or esc.setdefault(x, _escape(x)) for x in vals])
            out.append(t[0](*vals, *extra, text))
            m = t[1]
            q, b, n = q + m[0], b + m[1], n + m[2]
        return "".join(out), (q, b, n)

    def text(self, om: bool, scrape: Scrape | None = None) -> str:
        """This family's part of the exposition (OpenMetrics when ``om``, else text 0.0.4)."""
        return self.header(om) + self.lines(scrape or Scrape())


class Scrape:
    """What the families of one scrape share: the text of each value written so far, and the
    labels of each source (``Family.per_source``: the same for every family of a scrape)."""

    def __init__(self) -> None:
        self.numbers: dict = {}
        self._extras: dict[tuple[int, bool], Callable[[str], tuple[tuple[str, ...], tuple[str, ...]]]] = {}

    def extras(self, per: Mapping[str, Mapping[str, str]], escape: bool) -> Callable[[str], tuple[tuple[str, ...], tuple[str, ...]]]:
        """source -> (its label names, their values, escaped when ``escape``), from ``per``."""
        f = self._extras.get((id(per), escape))
        if f is None:
            seen: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
            names: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple of each set of names

            def f(source: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
                got = seen.get(source)
                if got is None:
                    ex = per.get(source) or {}
                    keys = tuple(ex)
                    keys = names.setdefault(keys, keys)
                    got = seen[source] = (keys, tuple(_escape(v) if escape else v for v in ex.values()))
                return got

            self._extras[(id(per), escape)] = f
        return f


def write(families: Iterable[Family]) -> bytes:
    """The text exposition (0.0.4) of ``families``, as prometheus_client's ``generate_latest`` writes them from a
    registry of their collector: ``replay``'s output. Raises :class:`NotPlain` for a family whose name an escaping
    might change (none of the contract's: tests/collector/test_exposition.py)."""
    scrape = Scrape()
    return "".join([fam.text(False, scrape) for fam in families]).encode("utf-8")


__all__ = ["Family", "NotPlain", "Scrape", "go_float", "write"]
