"""Exposition: the state as Prometheus families at scrape time, and the HTTP(S) that serves them.

* :mod:`.collector`   — the families of the log, built from the state at scrape time;
* :mod:`.text`        — a family as rows and its text format (one template per family);
* :mod:`.selfmetrics` — the families of ``serve`` itself; :mod:`.buildinfo` version and revision;
* :mod:`.identity`    — labels added at exposition (--label, DaemonSet namespace/pod/container);
* :mod:`.web`         — /metrics, /healthz, /readyz and the status page's routes; :mod:`.connections` the
  listeners and workers; :mod:`.webconfig` TLS, mTLS and basic auth.

It reads the state stage and the catalogues; the rules' findings reach it through the state's memory.
"""
