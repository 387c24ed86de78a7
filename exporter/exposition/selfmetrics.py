"""Self-metrics of ``serve``: per-source tailer counters, built at scrape time (custom collector).

Every family is pre-initialised for every configured source (0 until something happens), so
alerts never see a missing series. No sample carries a timestamp and nothing is pruned when the
server is quiet: ``hybrid_cache_exporter_file_modified_timestamp_seconds`` tells idle (the file is
still being written) from dead (it is not), together with ``hybrid_cache_last_line_timestamp_seconds``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.registry import Collector

from ..catalogues import contract as C
from . import buildinfo
from .family import Family


class SelfCollector(Collector):
    """``sources()`` returns the live source objects (file tailers and stdin); ``positions`` is the
    :class:`exporter.sources.Positions` or None; ``missing()`` -> {source: missing?} for the
    configured paths (see exporter.watch); ``web`` the ReloadingWebConfig when a file is given;
    ``over_limit()`` -> container logs not tailed because of ``--kubernetes-max-sources``;
    ``http()`` -> the listeners' counters (exporter.exposition.connections.Stats: ``errors`` and ``dropped``
    by label value, ``open``); ``format_changes()`` -> {source: times its header stage decided
    the format again}."""

    def __init__(
        self,
        sources: Callable[[], Iterable],
        positions=None,
        *,
        missing: Callable[[], dict[str, bool]] | None = None,
        web=None,
        over_limit: Callable[[], int] | None = None,
        http: Callable[[], Iterable] | None = None,
        format_changes: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.http = http
        self.sources = sources
        self.positions = positions
        self.missing = missing
        self.web = web
        self.over_limit = over_limit
        self.format_changes = format_changes

    def collect(self) -> Iterator:
        def fam(m: C.Metric, value: float | None = None) -> Family:
            f = Family(m)
            if value is not None:  # a family of one series without labels
                f.add_metric((), value)
            return f

        build = fam(C.BUILD_INFO)
        b = buildinfo.labels()
        build.add_metric([b[k] for k in C.BUILD_INFO.labels], 1)
        yield build
        read, lag, rot, trunc = fam(C.READ_BYTES), fam(C.READ_LAG_BYTES), fam(C.ROTATIONS), fam(C.TRUNCATIONS)
        open_files, overlong, mtime, up = fam(C.OPEN_FILES), fam(C.OVERLONG_LINES), fam(C.FILE_MODIFIED), fam(C.SOURCE_UP)
        errors, recovered, changes = fam(C.SOURCE_ERRORS), fam(C.RECOVERED_LINES), fam(C.LOG_FORMAT_CHANGES)
        changed = self.format_changes() if self.format_changes is not None else {}

        agg: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        mt: dict[str, float] = {}
        for s in self.sources():
            a = agg[s.source]
            a["read"] += s.read_bytes
            a["lag"] += s.lag()
            a["rot"] += s.rotations
            a["trunc"] += s.truncations
            a["open"] += s.open_files()
            a["overlong"] += s.overlong
            a["errors"] += getattr(s, "errors", 0)
            a["recovered"] += getattr(s, "recovered_lines", 0)
            is_up = getattr(s, "up", None)
            if is_up is None:
                is_up = getattr(s, "active", None) is not None
            a["up"] = max(a["up"], 1.0 if is_up else 0.0)
            if s.mtime is not None:
                mt[s.source] = max(mt.get(s.source, 0.0), s.mtime)
        for name in sorted(agg):
            a = agg[name]
            read.add_metric([name], a["read"])
            lag.add_metric([name], a["lag"])
            rot.add_metric([name], a["rot"])
            trunc.add_metric([name], a["trunc"])
            open_files.add_metric([name], a["open"])
            overlong.add_metric([name], a["overlong"])
            errors.add_metric([name], a["errors"])
            up.add_metric([name], a["up"])
            recovered.add_metric([name], a["recovered"])
            changes.add_metric([name], changed.get(name, 0))
            if name in mt:
                mtime.add_metric([name], mt[name])
        yield from (read, lag, rot, trunc, open_files, overlong, changes, errors, mtime, up, recovered)
        pos = self.positions
        yield fam(C.POSITIONS_WRITE_ERRORS, value=pos.write_errors if pos else 0)
        yield fam(C.POSITIONS_CORRUPT, value=pos.corrupt if pos else 0)
        if self.missing is not None:
            miss = fam(C.SOURCE_MISSING)
            for name, is_missing in sorted(self.missing().items()):
                miss.add_metric([name], 1.0 if is_missing else 0.0)
            yield miss
        if self.over_limit is not None:
            yield fam(C.SOURCES_OVER_LIMIT, value=self.over_limit())
        if self.web is not None:
            yield fam(C.WEB_CONFIG_RELOAD, value=0.0 if self.web.failing else 1.0)
        if self.http is not None:
            yield from _http(fam, list(self.http()))


def _http(fam, stats: list) -> Iterator:
    errors, dropped = defaultdict(float), defaultdict(float)
    open_now = 0.0
    for st in stats:
        with st.lock:
            for k, v in st.errors.items():
                errors[k] += v
            for k, v in st.dropped.items():
                dropped[k] += v
            open_now += st.open
    for m, counts in ((C.HTTP_ERRORS, errors), (C.HTTP_DROPPED, dropped)):
        f = fam(m)
        for k in sorted(counts):
            f.add_metric([k], counts[k])
        yield f
    yield fam(C.HTTP_CONNECTIONS, value=open_now)
