#!/bin/sh
# regenerate docs/status-page.png and docs/report-html.png (run from the repository root)
set -e
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
TMP=$(mktemp -d)
# the scenario's lines moved to end now (a live server: the status page greys a server that has gone quiet)
.venv/bin/python - "$TMP/sglang-mamba-bound.log" <<'PY'
import re, sys, time
sys.path.insert(0, "fixtures/scenarios")
from derive import SGL_TS, _lines
lines = _lines("sglang-mamba-bound.log")
last = next(m.group(1) for m in map(SGL_TS.match, reversed(lines)) if m)
shift = int(time.time()) - int(time.mktime(time.strptime(last, "%Y-%m-%d %H:%M:%S"))) - 3
out = []
for x in lines:
    m = SGL_TS.match(x)
    if m:
        t = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + shift
        x = "[" + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + x[m.end():]
    out.append(x)
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
.venv/bin/hybrid-cache-exporter serve --log "$TMP/sglang-mamba-bound.log" --from-beginning --listen 127.0.0.1:$PORT 2>/dev/null & SPID=$!
sleep 4
CH="chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars --user-data-dir=$TMP/profile --virtual-time-budget=5000"
$CH --window-size=1200,1320 --screenshot=docs/status-page.png http://127.0.0.1:$PORT/ 2>/dev/null
kill $SPID
.venv/bin/hybrid-cache-exporter report --html fixtures/scenarios/sglang-mamba-bound.log fixtures/scenarios/sglang-kv-bound.log > $TMP/report.html
$CH --window-size=1200,1900 --screenshot=docs/report-html.png file://$TMP/report.html 2>/dev/null
rm -rf "$TMP"
