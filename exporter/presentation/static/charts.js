/* hybrid-cache-exporter: the charts of the status page and of `report --html` (one code for both).
 * Reads the JSON in <script id="hce-data">, draws every [data-chart] element with uPlot
 * (vendored, see LICENSE.uplot) and, when data.refresh > 0, polls data.endpoint and updates
 * the panels and charts in place. Log time is sent as "clock seconds" (the log's wall clock
 * written as UTC), so the axis shows the times the log prints whatever the browser's zone. */
(function () {
  "use strict";
  var charts = {};
  var data = null;

  function clockDate(ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); }
  var fmtTick = null, fmtDay = null, fmtSec = null, fmtFull = null;
  function timeFormats() {
    if (fmtTick) return;
    fmtTick = uPlot.fmtDate("{HH}:{mm}");
    fmtDay = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}");
    fmtSec = uPlot.fmtDate("{HH}:{mm}:{ss}");
    fmtFull = uPlot.fmtDate("{YYYY}-{MM}-{DD} {HH}:{mm}:{ss}");
  }
  /* 24-hour ticks in log time; the first tick and day changes carry the date; ticks less than a
   * minute apart (incr, in seconds) carry their seconds, or several would read the same minute */
  function timeTicks(u, vals, axis, space, incr) {
    var last = null, secs = incr < 60;
    return vals.map(function (v) {
      var d = clockDate(v), day = d.getFullYear() * 400 + d.getMonth() * 32 + d.getDate();
      var s = last === null || day !== last ? fmtDay(d) + (secs ? fmtSec(d).slice(5) : "") : (secs ? fmtSec : fmtTick)(d);
      last = day;
      return s;
    });
  }
  function pct(v) { return v == null ? "-" : Math.round(v * 100) + "%"; }
  function num(v) { return v == null ? "-" : String(Math.round(v)); }

  /* the newest value of a column, and the newest row with any value (a lone row is padded with an empty one) */
  function latest(col) {
    for (var i = col.length - 1; i >= 0; i--) if (col[i] != null) return col[i];
    return null;
  }
  function latestRow(u) {
    for (var i = u.data[0].length - 1; i >= 0; i--)
      for (var s = 1; s < u.data.length; s++) if (u.data[s][i] != null) return i;
    return null;
  }
  /* a legend value: the one under the cursor, the newest one while the cursor is not over the chart
   * (uPlot passes no row then: before, the legend read "-" until hovered) */
  function legend(fmt) {
    return function (u, v, si, idx) {
      if (idx == null) {
        var row = si === 0 ? latestRow(u) : null;
        v = si === 0 ? (row == null ? null : u.data[0][row]) : latest(u.data[si]);
      }
      return fmt(v);
    };
  }

  /* the findings behind the lines: [t0, t1, colour, rule, strip] in x units; a sustained
   * finding shades the full height, an event finding (strip = 1) a band along the top */
  function shade(u) {
    var spans = u.hceSpans || [], ctx = u.ctx, b = u.bbox, h = Math.round(14 * (window.devicePixelRatio || 1));
    ctx.save();
    for (var i = 0; i < spans.length; i++) {
      var s = spans[i];
      var x0 = Math.max(u.valToPos(s[0], "x", true), b.left);
      var x1 = Math.min(u.valToPos(s[1], "x", true), b.left + b.width);
      if (x1 <= x0) continue;
      ctx.fillStyle = s[2];
      if (s[4]) ctx.fillRect(x0, b.top, Math.max(1, x1 - x0), h);
      else ctx.fillRect(x0, b.top, Math.max(1, x1 - x0), b.height);
    }
    ctx.restore();
  }

  function width(el) { return Math.max(320, Math.floor(el.clientWidth || el.parentNode.clientWidth || 900)); }

  /* the cap first, so that running (pinned at the cap: the finding) is drawn over its dashes */
  function timelineData(c) {
    var d = [c.t, c.kv, c.mamba, c.cap, c.running, c.queued];
    if (c.t.length !== 1) return d;
    /* uPlot spans a single x value over 1000 days: give it a second, empty row one bucket later */
    return d.map(function (col, i) { return col.concat([i === 0 ? col[0] + (c.bucket || 10) : null]); });
  }

  /* a dot only where a line cannot be drawn: a server with one or two rows so far */
  function few(u, si, i0, i1) { return i1 - i0 < 2; }

  /* one row has no width: show ten minutes around it instead of uPlot's default span */
  function xRange(u, lo, hi) { return lo == null ? [0, 1] : hi - lo < 60 ? [lo - 300, hi + 300] : [lo, hi]; }

  function colMax(col) {
    var m = 0;
    for (var i = 0; i < col.length; i++) if (col[i] != null && col[i] > m) m = col[i];
    return m;
  }

  /* the request axis scales to what was observed (running, queued): a cap far above it (vLLM's default 256 on a
     server running 20) would flatten the lines, so it is drawn only when it is within reach (then the axis holds it) */
  function reqRange(u) {
    var seen = Math.max(colMax(u.data[4]), colMax(u.data[5])), cap = colMax(u.data[3]);
    var top = cap <= seen * 1.5 + 4 ? Math.max(seen, cap) : seen;
    return [0, Math.max(1, top) * 1.1];
  }

  function timeline(el, c) {
    timeFormats();
    var opts = {
      width: width(el), height: 280, tzDate: clockDate,
      cursor: { drag: { x: true, y: false } },
      scales: {
        x: { time: true, range: xRange },
        ratio: { auto: false, range: [0, 1] },
        req: { range: reqRange }
      },
      axes: [
        { values: timeTicks, space: 70 },
        { scale: "ratio", label: "pool usage", size: 50, values: function (u, v) { return v.map(pct); } },
        { scale: "req", side: 1, label: "requests", size: 50, grid: { show: false } }
      ],
      series: [
        { label: "log time", value: legend(function (v) { return v == null ? "-" : fmtFull(clockDate(v)); }) },
        { label: "KV usage", points: { show: few }, scale: "ratio", stroke: "#1f77b4", width: 2, value: legend(pct) },
        { label: "mamba usage", points: { show: few }, scale: "ratio", stroke: "#d62728", width: 2, value: legend(pct) },
        { label: "cap", points: { show: few }, scale: "req", stroke: "#333", width: 1.5, dash: [8, 4], paths: uPlot.paths.stepped({ align: 1 }),
          value: legend(num) },
        { label: "running", points: { show: few }, scale: "req", stroke: "#2ca02c", width: 2, value: legend(num) },
        { label: "queued", points: { show: few }, scale: "req", stroke: "#ff7f0e", width: 1.5, dash: [4, 3], value: legend(num) }
      ],
      hooks: { drawClear: [shade] }
    };
    var u = new uPlot(opts, timelineData(c), el);
    u.hceSpans = c.spans;
    u.redraw(false, false);
    return u;
  }

  function histogram(el, h) {
    var bars = uPlot.paths.bars;
    var opts = {
      width: width(el), height: 200,
      scales: { x: { time: false, range: [0, 1] }, y: { auto: false, range: [0, 1] } },
      axes: [
        { label: "usage", incrs: [0.1, 0.2, 0.5], values: function (u, v) { return v.map(pct); } },
        { label: "share of log time", size: 50, values: function (u, v) { return v.map(pct); } }
      ],
      series: [
        { label: "usage", value: function (u, v) { return v == null ? "-" : pct(v - 0.05) + "-" + pct(v + 0.05); } },
        { label: "KV", stroke: "#1f77b4", fill: "rgba(31,119,180,0.55)", paths: bars({ size: [0.45, 60], align: -1 }),
          points: { show: false }, value: function (u, v) { return pct(v); } },
        { label: "mamba", stroke: "#d62728", fill: "rgba(214,39,40,0.55)", paths: bars({ size: [0.45, 60], align: 1 }),
          points: { show: false }, value: function (u, v) { return pct(v); } }
      ]
    };
    return new uPlot(opts, [h.x, h.kv, h.mamba], el);
  }

  function draw(root) {
    var els = (root || document).querySelectorAll("[data-chart]");
    for (var i = 0; i < els.length; i++) {
      var el = els[i], id = el.getAttribute("data-chart"), kind = el.getAttribute("data-kind") || "timeline";
      var src = kind === "histogram" ? (data.histograms || {})[id] : (data.charts || {})[id];
      if (!src || charts[kind + ":" + id]) continue;
      charts[kind + ":" + id] = kind === "histogram" ? histogram(el, src) : timeline(el, src);
    }
  }

  /* rows the browser has up to `since` stay; newer ones (the last may have grown) are replaced */
  function merge(old, d) {
    if (d.since == null || !old) return d;
    var keys = ["t", "kv", "mamba", "running", "queued", "cap"], out = {};
    var cut = d.t.length ? d.t[0] : Infinity, lo = d.first == null ? -Infinity : d.first;
    var i0 = 0, i1 = old.t.length;
    while (i0 < i1 && old.t[i0] < lo) i0++;
    while (i1 > i0 && old.t[i1 - 1] >= cut) i1--;
    keys.forEach(function (k) { out[k] = old[k].slice(i0, i1).concat(d[k]); });
    out.spans = d.spans; out.first = d.first; out.bucket = d.bucket;
    return out;
  }

  function since() {
    var s = Infinity;
    Object.keys(data.charts || {}).forEach(function (id) {
      var t = data.charts[id].t;
      s = Math.min(s, t.length ? t[t.length - 1] : 0);
    });
    return s === Infinity ? 0 : s;
  }

  function refresh() {
    var url = data.endpoint + (data.endpoint.indexOf("?") < 0 ? "?" : "&") + "since=" + since();
    fetch(url, { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (d) {
        var known = Object.keys(data.charts || {}).sort().join("|");
        if (Object.keys(d.charts || {}).sort().join("|") !== known) { location.reload(); return; }
        (d.panels || []).forEach(function (p) {
          var el = document.getElementById(p.id);
          if (el) el.innerHTML = p.html;
        });
        Object.keys(d.charts).forEach(function (id) {
          var c = merge(data.charts[id], d.charts[id]);
          data.charts[id] = c;
          var u = charts["timeline:" + id];
          if (!u) return;
          u.hceSpans = c.spans;
          u.setData(timelineData(c));
          if (u.cursor.idx == null) u.setLegend({ idx: null });  /* the newest values, unless the cursor reads a row */
        });
        var st = document.getElementById("hce-updated");
        if (st && d.updated) st.textContent = d.updated;
      })
      .catch(function (e) {
        var st = document.getElementById("hce-updated");
        if (st) st.textContent = "refresh failed (" + e.message + "); retrying";
      });
  }

  function boot() {
    var node = document.getElementById("hce-data");
    if (!node || typeof uPlot === "undefined") return;
    data = JSON.parse(node.textContent);
    draw(document);
    var t = null;
    window.addEventListener("resize", function () {
      clearTimeout(t);
      t = setTimeout(function () {
        Object.keys(charts).forEach(function (k) {
          var u = charts[k];
          u.setSize({ width: width(u.root.parentNode), height: u.height });
        });
      }, 150);
    });
    if (data.refresh > 0 && data.endpoint) setInterval(refresh, data.refresh * 1000);
  }

  window.hceCharts = { merge: merge, charts: charts };  /* for tests/web/test_browser.py */

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
