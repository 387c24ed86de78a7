"""Self-metrics of ``serve``: per-source tailer counters, built at scrape time (custom collector).

Every family is pre-initialised for every configured source (0 until something happens), so
alerts never see a missing series. No sample carries a timestamp and nothing is pruned when the
server is quiet: ``hybrid_cache_exporter_file_modified_timestamp_seconds`` tells idle (the file is
still being written) from dead (it is not), together with ``hybrid_cache_last_line_timestamp_seconds``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from . import buildinfo

P = "hybrid_cache_exporter_"


class SelfCollector(Collector):
    """``sources()`` returns the live source objects (file tailers and stdin); ``positions`` is the
    :class:`exporter.sources.Positions` or None; ``missing()`` -> {source: missing?} for the
    configured paths (see exporter.watch); ``web`` the ReloadingWebConfig when a file is given;
    ``over_limit()`` -> container logs not tailed because of ``--kubernetes-max-sources``."""

    def __init__(
        self,
        sources: Callable[[], Iterable],
        positions=None,
        *,
        missing: Callable[[], dict[str, bool]] | None = None,
        web=None,
        over_limit: Callable[[], int] | None = None,
    ) -> None:
        self.sources = sources
        self.positions = positions
        self.missing = missing
        self.web = web
        self.over_limit = over_limit

    def collect(self) -> Iterator:
        build = GaugeMetricFamily(
            P + "build_info",
            "1, with the exporter's version, git revision and Python version as labels.",
            labels=["version", "revision", "python_version"],
        )
        b = buildinfo.labels()
        build.add_metric([b["version"], b["revision"], b["python_version"]], 1)
        yield build
        read = CounterMetricFamily(P + "read_bytes", "Bytes read from the source (files: all generations).", labels=["source"])
        lag = GaugeMetricFamily(
            P + "read_lag_bytes", "Bytes in the source's open files not yet fed to the parser (size minus offset).", labels=["source"]
        )
        rot = CounterMetricFamily(P + "rotations", "File replaced at its path (rename+create, delete+recreate).", labels=["source"])
        trunc = CounterMetricFamily(P + "truncations", "File truncated or rewritten in place (copytruncate, : > file).", labels=["source"])
        open_files = GaugeMetricFamily(
            P + "open_files", "Open file descriptors (current file plus rotated ones being drained).", labels=["source"]
        )
        overlong = CounterMetricFamily(P + "overlong_lines", "Lines longer than --max-line-bytes, cut to that length.", labels=["source"])
        mtime = GaugeMetricFamily(
            P + "file_modified_timestamp_seconds",
            "Modification time of the source's current file (stdin: time of the last read). Compare with time() to tell idle from dead.",
            labels=["source"],
        )
        up = GaugeMetricFamily(P + "source_up", "1 while the source's file is open (stdin: connected), else 0.", labels=["source"])

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
            up.add_metric([name], a["up"])
            if name in mt:
                mtime.add_metric([name], mt[name])
        yield from (read, lag, rot, trunc, open_files, overlong, mtime, up)
        pos = self.positions
        yield CounterMetricFamily(
            P + "positions_write_errors", "Failed writes of the positions file (--positions).", value=pos.write_errors if pos else 0
        )
        yield CounterMetricFamily(
            P + "positions_corrupt", "Positions file found unreadable or corrupt at start (replaced).", value=pos.corrupt if pos else 0
        )
        if self.missing is not None:
            miss = GaugeMetricFamily(
                P + "source_missing",
                "1 while a configured --log path (or glob) has not appeared for --source-missing-after seconds (a typo?), else 0.",
                labels=["source"],
            )
            for name, is_missing in sorted(self.missing().items()):
                miss.add_metric([name], 1.0 if is_missing else 0.0)
            yield miss
        if self.over_limit is not None:
            yield GaugeMetricFamily(
                P + "sources_over_limit",
                "Container logs found under --kubernetes-pods but not read because --kubernetes-max-sources is reached.",
                value=self.over_limit(),
            )
        if self.web is not None:
            yield GaugeMetricFamily(
                P + "web_config_last_reload_successful",
                "1 if the web config files (--web.config.file and the certificates it names) in force are the newest on disk, 0 if a change failed to load.",
                value=0.0 if self.web.failing else 1.0,
            )
