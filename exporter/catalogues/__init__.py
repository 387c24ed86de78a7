"""The catalogues: one fact in one place, read by every stage (and by the parsers); a ground that imports nothing.

* :mod:`.contract`     — the metric contract: every family's name, type, help, labels and source line; each label's bound;
* :mod:`.rulebook`     — the rule catalogue: one entry per diagnosis rule (id, kind, words, shading, alert, flags);
* :mod:`.configvalues` — the configuration keys kept, and how a logged value reads (truthy, number, unset).
"""
