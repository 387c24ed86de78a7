"""Presentation: what a person reads: ``report``, ``replay --explain`` and the live status page.

* :mod:`.report`  — the report's data (``build_report``; ``server_status`` for the page);
* :mod:`.render`  — how it reads: text, Markdown, self-contained HTML; :mod:`.drawing` the charts;
* :mod:`.status`  — the live status page (/) and /status.json; ``static/`` its vendored scripts (uPlot);
* :mod:`.explain` — ``replay --explain``: what each line was read as, and every fact with the line that proves it;
* :mod:`.boots`   — before and after a restart in one log: the two boots compared.

The last stage: it may read every stage before it, and nothing but the composition root reads it.
"""
