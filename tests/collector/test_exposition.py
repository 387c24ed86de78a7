"""Our families written from their rows (exporter/exposition/family.py, text.py) are what prometheus_client writes.

The reference is the path every scrape took before: prometheus_client's own family classes
(``GaugeMetricFamily``, ``CounterMetricFamily``, ``InfoMetricFamily``) filled by the same
``add_metric`` calls, the labels of identity.Labelled added sample by sample, and prometheus_client's
encoder chosen by ``choose_encoder`` for each Accept header a scraper sends. Many sources (every
fixture, several times over, some with hostile names), the self-metrics of as many tailers, the
process collector's kind of family, ``--label`` and DaemonSet labels, every exposition format and escaping: the
bytes must be the same. No time is measured here (bench/scrape_scale.py does that).
"""

from __future__ import annotations

import glob
import gzip
import io
import math
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from exporter.app import new_pipeline
from exporter.catalogues import contract as C
from exporter.exposition import connections, family
from exporter.exposition.collector import HybridCacheCollector
from exporter.exposition.family import Family, go_float, write
from exporter.exposition.identity import Labelled
from exporter.exposition.selfmetrics import SelfCollector
from exporter.exposition.text import encode
from exporter.exposition.web import App, Handler, _NameFilter
from exporter.exposition.webconfig import WebConfig
from exporter.reading.offline import replay_files

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted(glob.glob(str(ROOT / "fixtures" / "**" / "*.log"), recursive=True))
COPIES = 3  # each fixture as this many sources
# source names a log path or --log NAME=PATH can give: quotes, backslashes, a newline, braces, UTF-8
HOSTILE = ('quote"d', "back\\slash", "new\nline", "{braces}", "ünïcode-日本", "")

ACCEPT = [
    None,
    "text/plain",
    "text/plain;version=0.0.4",
    "application/openmetrics-text",
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text; version=0.0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,text/plain;version=0.0.4;q=0.3",  # Prometheus 3
    "application/openmetrics-text;version=1.0.0;escaping=underscores",
    "application/openmetrics-text;version=1.0.0;escaping=dots",
    "application/openmetrics-text;version=1.0.0;escaping=values",
    "text/plain;version=1.0.0;escaping=allow-utf-8",
    "text/plain;version=1.0.0;escaping=dots",
    "text/plain;version=1.0.0;escaping=values",
]
CLASSES = {C.GAUGE: GaugeMetricFamily, C.COUNTER: CounterMetricFamily, C.INFO: InfoMetricFamily}


class _Tailer:
    """What SelfCollector reads of a tailer."""

    def __init__(self, source: str, i: int) -> None:
        self.source, self.read_bytes, self.rotations, self.truncations = source, 1000.0 * i, i % 3, i % 2
        self.overlong, self.errors, self.recovered_lines, self.up = i % 5, 0, i, i % 4 != 0
        self.mtime, self.lagging = (1.7e9 + i if i % 7 else None), 0

    def lag(self) -> int:
        return self.lagging

    def open_files(self) -> int:
        return 1


class _Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.errors = {"accept": 0, "answer": 1, "collect": 0, "loop": 0}
        self.dropped = {"timeout": 2, "tls": 0, "limit": 0}
        self.open = 3


class _Positions:
    write_errors, corrupt = 1, 0


class _Web:
    failing = False


class _Process:
    """Families of prometheus_client's own classes beside ours (the process collector's, with
    values that do not move between the two encodings compared)."""

    def collect(self):
        yield GaugeMetricFamily("process_open_fds", "Number of open file descriptors.", value=42)
        yield CounterMetricFamily("process_cpu_seconds", "Total user and system CPU time spent in seconds.", value=1.5)
        g = GaugeMetricFamily("other_labelled", 'Help with "quotes" and \\ a backslash.', labels=["source"])
        g.add_metric(['quote"d'], 1)
        yield g


class _AsClient:
    """The collectors as they were: every Family replayed into prometheus_client's class of its
    type through ``add_metric``, as exporter/exposition/collector.py and selfmetrics.py built them."""

    def __init__(self, registry) -> None:
        self.registry = registry

    def collect(self):
        for fam in self.registry.collect():
            if not isinstance(fam, Family):
                yield fam
                continue
            m = C.BY_NAME[fam.sample_name]
            out = CLASSES[m.type](m.family, m.help, labels=list(m.labels))
            for vals, v in fam.rows:
                if m.type == C.INFO:
                    out.add_metric(list(vals[: len(m.labels)]), dict(zip(m.info_labels, vals[len(m.labels) :], strict=True)))
                else:
                    out.add_metric(list(vals), v)
            yield out


def _pipeline():
    pipe = new_pipeline()
    names = []
    for k in range(COPIES):
        for path in FIXTURES:
            name = f"{Path(path).parent.name}-{Path(path).stem}-{k}"
            replay_files(pipe, [path], name, io.StringIO())
            names.append(name)
    for i, name in enumerate(HOSTILE):  # hostile names on real logs
        pipe.feed_text(name, Path(FIXTURES[i]).read_text(encoding="utf-8", errors="replace"))
        names.append(name)
    pipe.finish()
    return pipe, names


@pytest.fixture(scope="module")
def many():
    """Registries of many sources, new and as they were, with ``--label``s and pod labels."""
    pipe, names = _pipeline()
    tailers = [_Tailer(n, i) for i, n in enumerate(names)]
    tailers[1].lagging = 17

    def registry():
        reg = CollectorRegistry(auto_describe=False)
        reg.register(HybridCacheCollector(pipe))
        reg.register(
            SelfCollector(
                lambda: tailers,
                _Positions(),
                missing=lambda: {n: i % 9 == 0 for i, n in enumerate(names)},
                web=_Web(),
                over_limit=lambda: 4,
                http=lambda: [_Stats(), _Stats()],
            )
        )
        reg.register(_Process())
        return reg

    reg = registry()
    # pods for two thirds of the sources (a DaemonSet), the others without; a value to escape
    pods = {n: {"namespace": "ns", "pod": f'p"{i}', "container": "c\\x"} for i, n in enumerate(names) if i % 3}
    for i, n in enumerate(names[::5]):  # another set of keys; one the series has (it keeps its own)
        pods[n] = {"engine": "not-this", "pod": f"q{i}"}
    const = {"cluster": "eu-1", "node": 'n"1\\\n', "pod": "a pod label by source takes its place"}
    return {
        "plain": (reg, _AsClient(reg)),
        "labelled": (Labelled(reg, const, lambda: pods), Labelled(_AsClient(reg), const, lambda: pods)),
        "pods": (Labelled(reg, {}, lambda: pods), Labelled(_AsClient(reg), {}, lambda: pods)),
    }


@pytest.mark.parametrize("how", ["plain", "labelled", "pods"])
@pytest.mark.parametrize("accept", ACCEPT)
def test_many_sources_give_prometheus_clients_bytes(many, how: str, accept: str | None, monkeypatch) -> None:
    new, old = many[how]
    encoder, _ = choose_encoder(accept)
    written = []
    text = Family.text
    monkeypatch.setattr(Family, "text", lambda self, *a: written.append(self.name) or text(self, *a))
    got = encode(new, encoder)
    want = encoder(old)
    assert got == want
    series = sum(1 for ln in want.splitlines() if not ln.startswith(b"#"))
    assert series > 10_000  # many series: the families of the contract, hundreds of times each
    # names that some escaping changes are prometheus_client's to write; else every Family is ours
    renamed = any(f"escaping={e}" in (accept or "") for e in ("dots", "values"))
    assert (len(written) == 0) == renamed
    if not renamed:
        assert len(written) == sum(1 for f in new.collect() if isinstance(f, Family))


def test_the_same_series_read_back(many) -> None:
    """Parsed back, the series (name, labels, value) are those of the old path, one for one."""
    new, old = many["labelled"]

    def series(body: bytes) -> list[tuple]:
        out = []
        for fam in text_string_to_metric_families(body.decode()):
            out += [(s.name, tuple(sorted(s.labels.items())), repr(s.value)) for s in fam.samples]
        return out

    got, want = series(encode(new)), series(choose_encoder(None)[0](old))
    assert got == want and len(set(got)) == len(got)
    hostile = {dict(labels).get("source") for _, labels, _ in got}
    assert set(HOSTILE) <= hostile


@pytest.mark.parametrize(
    "names",
    [
        [C.FINDING.name, C.SOURCE_UP.name],
        [C.READ_BYTES.name],
        [C.READ_BYTES.family],
        ["process_cpu_seconds_total"],
        ["other_labelled"],
        ["nothing"],
    ],
)
def test_the_name_filter(many, names: list[str]) -> None:
    new, old = many["labelled"]
    for accept in (None, "application/openmetrics-text; version=1.0.0"):
        encoder, _ = choose_encoder(accept)
        assert encode(_NameFilter(new, names), encoder) == encoder(_NameFilter(old, names))


def test_an_empty_family_is_filtered_as_before() -> None:
    """A counter with no series: kept by its family name (headers only), not by its sample name."""
    reg = CollectorRegistry(auto_describe=False)

    class One:
        def collect(self):
            yield Family(C.READ_BYTES)

    reg.register(One())
    for names in ([C.READ_BYTES.family], [C.READ_BYTES.name]):
        assert encode(_NameFilter(reg, names)) == choose_encoder(None)[0](_NameFilter(_AsClient(reg), names))


VALUES = [0, 0.0, -0.0, 1, True, 3, -3.5, 1e-9, 1234567.0, 12345678.9, 1e21, 2**63, -(2**70), math.inf, -math.inf, math.nan, 0.1 + 0.2]


@pytest.mark.parametrize("m", C.LOG_METRICS + C.SELF, ids=lambda m: m.name)
def test_each_contract_family_and_value(m: C.Metric) -> None:
    """Every family of the contract, with every kind of value: the samples and the bytes of
    prometheus_client's class of that type."""
    fam, ref = Family(m), CLASSES[m.type](m.family, m.help, labels=list(m.labels))
    for i, v in enumerate(VALUES):
        labels = [f"{k}-{i}" if i % 4 else f'{k}"\\{i}\n' for k in m.labels]
        if m.type == C.INFO:
            info = {k: f"v{i}" for k in m.info_labels}
            fam.add_metric(labels, info)
            ref.add_metric(labels, info)
        else:
            fam.add_metric(labels, v)
            ref.add_metric(labels, v)

    class Reg:
        def __init__(self, f) -> None:
            self.f = f

        def collect(self):
            yield self.f

    assert [s[:3] for s in fam.samples] == [s[:3] for s in ref.samples]
    for accept in ACCEPT:
        encoder, _ = choose_encoder(accept)
        assert encode(Reg(fam), encoder) == encoder(Reg(ref)), accept


@given(st.floats() | st.integers(min_value=-(2**80), max_value=2**80))
def test_go_float_is_prometheus_clients(v) -> None:
    """A value's text as ``replay`` writes it without prometheus_client: its ``floatToGoString``."""
    assert go_float(v) == floatToGoString(v)


@pytest.mark.parametrize("v", VALUES)
def test_go_float_of_the_edges(v) -> None:
    assert go_float(v) == floatToGoString(v)


def test_replays_exposition_is_the_registrys() -> None:
    """``replay``'s text (:func:`write`, no prometheus_client) is what a registry of the collector gives
    prometheus_client's ``generate_latest``, for the many sources with hostile names."""
    pipe, _ = _pipeline()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HybridCacheCollector(pipe))
    got = write(HybridCacheCollector(pipe).collect())
    assert got == generate_latest(_AsClient(reg))
    assert got.count(b"\n") > 10_000


def test_replay_loads_no_prometheus_client() -> None:
    """The claim of exporter/exposition/family.py: ``replay`` of a log, its exposition written, never imports
    prometheus_client (a third of its start-up, which bench/run.py times against mtail)."""
    log = ROOT / "fixtures" / "scenarios" / "sglang-mamba-bound.log"
    code = (
        "import io, sys, contextlib\n"
        "from exporter.cli import main\n"
        "sys.stdout = io.TextIOWrapper(io.BytesIO())\n"
        f"rc = main(['replay', {str(log)!r}])\n"
        "sys.stdout.flush(); out = sys.stdout.buffer.getvalue(); sys.stdout = sys.__stdout__\n"
        "print(rc, b'hybrid_cache_finding' in out, sorted(m for m in sys.modules if m.startswith('prometheus_client')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0", "True", "[]"], r.stdout


def test_an_info_family_takes_the_contracts_labels_only() -> None:
    fam = Family(C.SERVER_INFO)
    with pytest.raises(ValueError, match="info labels"):
        fam.add_metric(["sglang", "s"], {"model": "m"})
    with pytest.raises(ValueError, match="label values"):
        Family(C.FINDING).add_metric(["sglang", "s", "0"], 1)


def test_a_name_an_escaping_would_change_is_prometheus_clients(monkeypatch) -> None:
    """A label name outside [a-zA-Z_][a-zA-Z0-9_]* (none today: --label and the pod labels are
    checked) is left to prometheus_client, whose bytes these are then."""
    assert family._PLAIN_NAME.match("dp_rank") and not family._PLAIN_NAME.match("a.b")
    fam = Family(C.FINDING)
    fam.add_metric(["sglang", "s", "0", "mamba_bound"], 1)

    class Reg:
        def collect(self):
            yield fam.labelled({"a.b": "x"}, {})

    for accept in ACCEPT[:4]:
        encoder, _ = choose_encoder(accept)
        want = encoder(Labelled(_AsClient(_Plain(fam)), {"a.b": "x"}))
        assert encode(Reg(), encoder) == want


class _Plain:
    def __init__(self, fam: Family) -> None:
        self.fam = fam

    def collect(self):
        yield self.fam


@pytest.mark.parametrize("accept", [None, "application/openmetrics-text; version=1.0.0"])
@pytest.mark.parametrize("gzipped", [False, True])
def test_what_metrics_answers(many, accept: str | None, gzipped: bool) -> None:
    """/metrics (the handler's answer to a request head, no socket): the bytes of the old path,
    compressed a family at a time when the client accepts gzip."""
    new, old = many["labelled"]
    app = App(new, lambda: (True, []), list, WebConfig())
    handler = type("H", (Handler,), {"app": app, "stats": connections.Stats()})
    head = "GET /metrics HTTP/1.1\r\nHost: x\r\n"
    head += f"Accept: {accept}\r\n" if accept else ""
    head += "Accept-Encoding: gzip\r\n" if gzipped else ""
    answer, _ = handler.answer((head + "\r\n").encode(), ("127.0.0.1", 1))
    headers, body = answer.split(b"\r\n\r\n", 1)
    assert headers.startswith(b"HTTP/1.1 200")
    assert (b"Content-Encoding: gzip" in headers) == gzipped
    assert (gzip.decompress(body) if gzipped else body) == choose_encoder(accept)[0](old)
