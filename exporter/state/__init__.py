"""State: lines to what the log said, kept per source and DP rank, and the facts derived from it.

* :mod:`.pipeline`   — what the commands feed: routes each line through the sampler, the joiner and the state;
* :mod:`.sampler`    — the hot path: which batch lines become samples; :mod:`.scan` the bulk scanner (+ ``_scan.c``);
* :mod:`.wrapped`    — a message cut over several lines, held and joined;
* :mod:`.store`      — ``SourceState`` / ``ServerState``: the one writer of the state, the counts and the log clock;
* :mod:`.provenance` — what proves each fact, and where a boot ends; :mod:`.revisions` a later message of one boot;
* :mod:`.facts`      — ``ServerFacts``: what the log says about one server, derived once per generation;
* :mod:`.snapshot`   — what the log said, saved with the positions and restored.

It imports the reading stage, the capacity model, the catalogues and the parsers; nothing that reads it.
"""
