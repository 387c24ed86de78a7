#!/bin/sh
# regenerate docs/status-page.png and docs/report-html.png (run from the repository root)
set -e
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
.venv/bin/hybrid-cache-exporter serve --log fixtures/scenarios/sglang-mamba-bound.log --from-beginning --listen 127.0.0.1:$PORT 2>/dev/null & SPID=$!
sleep 4
TMP=$(mktemp -d)
CH="chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking --disable-component-update --disable-sync --hide-scrollbars --user-data-dir=$TMP/profile --virtual-time-budget=5000"
$CH --window-size=1200,1180 --screenshot=docs/status-page.png http://127.0.0.1:$PORT/ 2>/dev/null
kill $SPID
.venv/bin/hybrid-cache-exporter report --html fixtures/scenarios/sglang-mamba-bound.log fixtures/scenarios/sglang-kv-bound.log > $TMP/report.html
$CH --window-size=1200,1900 --screenshot=docs/report-html.png file://$TMP/report.html 2>/dev/null
rm -rf "$TMP"
