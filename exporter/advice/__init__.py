"""Advice: the engine flags that answer a finding, and what a flag would change.

* :mod:`.flags`     — the flag catalogue: one entry per engine flag (gates, candidate value, risk, effect);
* :mod:`.recommend` — observes the rules: one value per flag for each live finding, in the documented order;
* :mod:`.plan`      — what ``plan`` computes and renders from a config or a log.

It reads the diagnosis and the state; it knows no metric family and no page.
"""
