"""Panel, variable and layout helpers shared by both dashboards (``hybrid_cache.py`` and ``fleet.py``).

One place for what a panel of this project looks like (data source, refIds, legend table, instant table
queries, usage-ratio columns), how the panels are laid out in rows, and the dashboard frame (links,
data source variable), so the two dashboards cannot drift apart in how they are built.
"""

from __future__ import annotations

from collections.abc import Callable

from grafanalib.core import Dashboard, GridPos, RowPanel, Stat, Table, Target, Template, Templating, TimeSeries

from exporter.catalogues import contract

DS = {"type": "prometheus", "uid": "${datasource}"}
USAGE_STEPS = [{"color": "green", "value": None}, {"color": "orange", "value": 0.8}, {"color": "red", "value": 0.95}]


def known(metric: str) -> str:
    """``metric``, if the metric contract (exporter/catalogues/contract.py) has it: a typo fails `make dashboards`."""
    if metric not in contract.BY_NAME:
        raise KeyError(f"{metric} is not in exporter/catalogues/contract.py")
    return metric


def tgt(expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str = "time_series") -> Target:
    return Target(expr=expr, legendFormat=legend, refId=ref, instant=instant, format=fmt, datasource=DS)


def timeseries(title: str, description: str, targets: list[Target], unit: str = "short", **kw) -> TimeSeries:
    for i, t in enumerate(targets):
        t.refId = chr(ord("A") + i)
    kw.setdefault("legendDisplayMode", "table")
    kw.setdefault("legendCalcs", ["lastNotNull", "max"])
    return TimeSeries(title=title, description=description, dataSource=DS, targets=targets, unit=unit, **kw)


def table(title: str, description: str, targets: list[Target], transformations: list[dict] | None = None, **kw) -> Table:
    for i, t in enumerate(targets):
        t.refId = chr(ord("A") + i)
        t.instant = True
        t.format = "table"
    hide = {"transformations": transformations} if transformations else {}
    return Table(title=title, description=description, dataSource=DS, targets=targets, **hide, **kw)


def organize(exclude: list[str], rename: dict[str, str] | None = None) -> dict:
    return {
        "id": "organize",
        "options": {"excludeByName": {k: True for k in exclude}, "renameByName": rename or {}, "indexByName": {}},
    }


def flag_stat(title: str, description: str, target: Target, words: tuple[str, str], good: int) -> Stat:
    """A 0/1 series as a coloured word per series: green when it is ``good``, red otherwise."""
    colors = ("green", "red") if good == 0 else ("red", "green")
    return Stat(
        title=title,
        description=description,
        dataSource=DS,
        targets=[target],
        reduceCalc="lastNotNull",
        graphMode="none",
        colorMode="background",
        thresholds=[{"color": colors[0], "value": None}, {"color": colors[1], "value": 1}],
        mappings=[
            {"type": "value", "options": {"0": {"text": words[0]}, "1": {"text": words[1]}}},
        ],
    )


def usage_column(col: str) -> dict:
    """A table column that holds a usage ratio: shown as a percentage, coloured by USAGE_STEPS."""
    return {
        "matcher": {"id": "byName", "options": col},
        "properties": [
            {"id": "unit", "value": "percentunit"},
            {"id": "thresholds", "value": {"mode": "absolute", "steps": USAGE_STEPS}},
            {"id": "custom.displayMode", "value": "color-text"},
        ],
    }


def var(name: str, label: str, query: str) -> Template:
    """A multi-value query variable that starts on All (``.*``, which also matches an absent label)."""
    t = Template(
        name=name,
        label=label,
        query=query,
        dataSource=DS,
        includeAll=True,
        multi=True,
        allValue=".*",
        default="$__all",
        refresh=2,
        sort=1,
    )
    t._current = {"selected": True, "text": ["All"], "value": ["$__all"]}  # grafanalib writes text "$__all"
    return t


def layout(sections: list[tuple[str, list]], width: Callable[[object], int], height: Callable[[object], int] = lambda p: 8) -> list:
    """All panels in display order: a row header per section, then panels left to right, a new line when
    one does not fit; a full-width panel ends its line."""
    out: list = []
    y = 0
    for title, section in sections:
        out.append(RowPanel(title=title, gridPos=GridPos(h=1, w=24, x=0, y=y)))
        y += 1
        x = 0
        for p in section:
            w, h = width(p), height(p)
            if x + w > 24:
                x, y = 0, y + 8
            p.gridPos = GridPos(h=h, w=w, x=x, y=y)
            out.append(p)
            x += w
            if w == 24:
                x, y = 0, y + h
        if x:
            y += 8
    return out


def dashboard(title: str, uid: str, description: str, tags: list[str], refresh: str, panels: list, variables: list[Template]) -> Dashboard:
    """The frame both dashboards share: the link menu to each other (by tag) and the data source variable first."""
    return Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=tags,
        timezone="browser",
        refresh=refresh,
        panels=panels,
        links=[
            {
                "title": "Hybrid cache dashboards",
                "type": "dashboards",
                "tags": ["hybrid-cache-exporter"],
                "asDropdown": True,
                "includeVars": False,
                "keepTime": True,
            }
        ],
        templating=Templating(
            list=[
                Template(name="datasource", label="Data source", query="prometheus", type="datasource", default="Prometheus"),
                *variables,
            ]
        ),
    ).auto_panel_ids()
