"""Diagnosis: what the state means, on log time.

* :mod:`.rules`    — the diagnosis rules (docs/rules.md): their conditions; they emit transitions of findings;
* :mod:`.memory`   — what the rules remember between samples (hysteresis, evidence, usage, boots) and the
  recommendations keep; held on the state objects for the server it is about, never read by the state;
* :mod:`.workload` — the request lengths a log shows, the ratio that serves them; vLLM's shared pool;
* :mod:`.history`  — a bounded per-server timeline in log time, for the pictures.

It reads the state stage; it knows no flag, no metric family and no page.
"""
