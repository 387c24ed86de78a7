"""``replay --explain``: what each line of a log was read as, and why (docs/formats/README.md#checking-a-format);
then every fact the exposition shows, with the line that proves it (:func:`proofs`, also ``report --json``).

For every line: its outcome, the engine, the time read (in the zone of ``--log.timezone``), the
rank tags, what read its header (``Header.via``: the SGLang or vLLM fast path, the generic
``preamble`` reader, a JSON or logfmt record and the key its message was in) and the event with
its numbers, or why it says nothing. The lines are read as ``replay`` reads them (rotated
generations, compressed files, Docker and CRI records: :mod:`exporter.reading.offline`,
:mod:`exporter.reading.reader`) and fed, one by one, into the pipeline it is given, so the engine and
year each line is read with are the source's at that line, and the totals at the end are the
pipeline's own (a message a terminal wrapped counts where it was joined).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import fields, is_dataclass
from typing import TextIO

from parsers import events as ev
from parsers import message_line
from parsers.clock import zone_name
from parsers.header import read_header

from ..catalogues import contract
from ..reading.lines import Fragment
from ..reading.offline import order_generations
from ..reading.reader import Reader, read_blocks
from ..state.facts import basis_of, effective_max_running
from ..state.provenance import DEFAULT_HOW, LINE_COUNT, NEWEST_LINE, Basis, Proof
from ..state.store import ServerState, SourceState

MAX_EVENT_TEXT = 240


def explain_files(pipe, paths: list[str], source: str | None, out: TextIO, err: TextIO) -> int:
    """Explain every line of ``paths`` on ``out`` and feed it to ``pipe``; returns the number of
    files that could not be read (reported on ``err``)."""
    failed = 0
    for name, members in order_generations(list(paths), getattr(pipe, "engine", None), err):
        name = source or name
        src = pipe.source(name)
        reader = Reader()
        read_by: Counter[str] = Counter()
        for path in members:
            label = "stdin" if path == "-" else os.path.basename(path)
            src.mark_file(label)
            n = 0
            try:
                for text in read_blocks(path, reader, flush=False):
                    for line in text[:-1].split("\n"):
                        n += 1
                        out.write(f"{label}:{n}  {describe(src, line, read_by)}\n")
                        pipe.feed(name, line)
            except (OSError, EOFError, ValueError) as e:
                print(f"hybrid-cache-exporter: {path}: cannot read: {getattr(e, 'strerror', None) or e}", file=err)
                failed += 1
            for line in reader.flush():  # the last line without its newline (a fragment): read only when whole
                n += 1
                note = "" if type(line) is not Fragment else "  (no newline: read only when its message is whole, docs/reading.md)"
                out.write(f"{label}:{n}  {describe(src, line, read_by)}{note}\n")
                pipe.feed(name, line)
        pipe.finish()
        lines = src.lines
        out.write(
            f"-- source {name}: {lines.get(ev.PARSED, 0)} parsed, {lines.get(ev.IGNORED, 0)} ignored, "
            f"{lines.get(ev.UNRECOGNIZED, 0)} unrecognized; engine {src.engine or 'not known (no SGLang or vLLM message)'}; "
            f"times read in zone {zone_name()}\n"
        )
        if read_by:
            out.write("-- headers read by: " + ", ".join(f"{k} {v}" for k, v in read_by.most_common()) + "\n")
        ss = pipe.sampler.sampling.get(name)
        if ss is not None:  # the header stage's decision (docs/formats/README.md#formats-read)
            st = ss.stage
            out.write(f"-- envelope: {st.envelope or 'none'} ({st.changes} changes; {len(st.templates)} templates learned)\n")
        write_proofs(src, out)
    return failed


# --------------------------------------------------------------------------------------------
# the facts and what proves them (exporter/state/provenance.py)

_CAPACITY = {m.key: m for m in contract.CAPACITY}


def _num(v: object) -> object:
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _record(src: SourceState, name: str, labels: dict[str, str], value: object, p: Proof | None) -> dict:
    """One fact as ``report --json`` and ``replay --explain`` give it."""
    r: dict = {"metric": name, "labels": labels, "value": _num(value)}
    if p is None:  # (a fact restored from a --positions snapshot: its line was read by an earlier process)
        r["basis"] = None
        return r
    file, line = src.where(p.line)
    dp, tp, pp = p.rank
    r.update(basis=str(p.basis), rule=p.rule, file=file, line=line, lines=p.lines, boot=p.boot, dp_rank=dp, tp_rank=tp, pp_rank=pp)
    if p.also:
        r["also"] = [dict(zip(("file", "line"), src.where(n), strict=True)) for n in p.also]
    if p.revises is not None:
        r["revises"] = dict(zip(("file", "line"), src.where(p.revises), strict=True))
    if p.message is not None:
        n = src.ledger.confirmations((dp, tp or 0, pp or 0), p.message)
        if n:
            r["confirmed_by_ranks"] = n
    return r


def _max_running(src: SourceState, srv: ServerState) -> tuple[float | None, Proof | None, str]:
    """The effective request cap (``facts.effective_max_running``), what proves it, and its ``basis`` label."""
    v, how = effective_max_running(src, srv)
    if v is None:
        return None, None, ""
    if how == "log":
        p = srv.proofs.get("max_running_requests") or src.proofs.get("config/_max_num_seqs_default")
    elif how == "args":
        p = src.proofs.get("config/max_num_seqs")
    else:
        head, _, why = how.partition(": ")
        rule = f"not in the log: the engine's {how} for the release and device the log shows" if how in DEFAULT_HOW else why or head
        p = Proof(Basis.DEFAULT, None, src.restarts + 1, (srv.dp_rank, None, None), rule)
    return v, p, basis_of(how)


def proofs(src: SourceState, srv: ServerState | None = None) -> list[dict]:
    """Every fact of ``src`` the exposition shows (of the server ``srv`` only, when given; else the
    source's configuration and release: ``hybrid_cache_server_info``), each with what proves it:
    the file and line, boot and rank, basis and rule (exporter/state/provenance.py). The runtime gauges
    and counters, which the hot path keeps without their lines, are listed with their basis: the
    newest line that carried the field, the lines counted."""
    out: list[dict] = []
    if srv is None:
        cfg = src.config
        for label, keys in contract.SERVER_INFO_KEYS:
            k = next((k for k in keys if cfg.get(k) not in (None, "")), None)
            if k is not None:
                out.append(_record(src, contract.SERVER_INFO.name, {"label": label, "key": k}, cfg[k], src.proofs.get("config/" + k)))
        if src.version:
            out.append(_record(src, contract.SERVER_INFO.name, {"label": "version"}, src.version, src.proofs.get("version")))
        k = cfg.get("_gdn_prefill_kernel")
        if isinstance(k, str):
            out.append(_record(src, contract.GDN_PREFILL_KERNEL.name, {"kernel": k}, 1, src.proofs.get("config/_gdn_prefill_kernel")))
        return out
    lab = {"dp_rank": srv.dp_rank}
    for key, v in srv.capacity.items():
        m = _CAPACITY.get(key)
        if m is not None:
            out.append(_record(src, m.name, lab, v, srv.proofs.get(key)))
    v, p, basis = _max_running(src, srv)
    if v is not None:
        out.append(_record(src, contract.MAX_RUNNING.name, {**lab, "basis": basis}, v, p))
    for label, d, prefix, m in (
        ("state", srv.mamba_state_bytes, "mamba_state_bytes/", contract.MAMBA_STATE_BYTES),
        ("buffer", srv.replayssm_buffer_bytes, "replayssm_buffer_bytes/", contract.REPLAYSSM_BUFFER_BYTES),
    ):
        for k, v in d.items():
            out.append(_record(src, m.name, {**lab, label: k}, v, srv.proofs.get(prefix + k)))
    boot, rank = src.restarts + 1, (srv.dp_rank, None, None)
    for m in contract.RUNTIME:
        if m.key in srv.gauges:
            out.append(_record(src, m.name, lab, srv.gauges[m.key], Proof(Basis.LOGGED, None, boot, rank, NEWEST_LINE)))
    for m in contract.COUNTERS:
        if m.key in srv.counters:
            out.append(_record(src, m.name, lab, srv.counters[m.key], Proof(Basis.DERIVED, None, boot, rank, LINE_COUNT)))
    return out


def write_proofs(src: SourceState, out: TextIO) -> None:
    """The facts of ``src`` and what proves each, one per line (``replay --explain``'s end)."""
    rows = proofs(src) + [r for _, srv in sorted(src.servers.items()) for r in proofs(src, srv)]
    rows = [r for r in rows if r.get("rule") not in (NEWEST_LINE, LINE_COUNT)]
    if not rows:
        return
    out.write(f"-- facts of source {src.name} (boot {src.restarts + 1}), each with what proves it:\n")
    for r in rows:
        labels = ",".join(f'{k}="{v}"' for k, v in r["labels"].items())
        head = f"{r['metric'].removeprefix(contract.PREFIX)}{{{labels}}} = {r['value']}"
        if r.get("basis") is None:
            out.write(f"   {head}  no line: restored from the positions snapshot\n")
            continue
        where = f"{r['file']}:{r['line']}" if r["line"] is not None else "no line"
        if r["lines"] > 1:
            where += f"-{r['line'] + r['lines'] - 1}"
        for a in r.get("also", ()):
            where += f" + {a['file']}:{a['line']}"
        if r.get("revises"):
            where += f" (revises {r['revises']['file']}:{r['revises']['line']})"
        rank = " ".join(f"{k[:2]}={r[k]}" for k in ("dp_rank", "tp_rank", "pp_rank") if r[k] is not None)
        text = f"   {head}  {r['basis']}  {where}  boot {r['boot']} {rank}"
        if r.get("confirmed_by_ranks"):
            text += f" (the same line from {r['confirmed_by_ranks']} other rank(s))"
        if r["rule"]:
            text += f"  [{r['rule']}]"
        out.write(text + "\n")


def describe(src, line: str, read_by: Counter | None = None) -> str:
    """One line's verdict as the parsers give it for the source ``src`` as it stands."""
    h = read_header(line, src.engine, src.year)
    parsed = message_line(h, src.engine)
    if parsed.tod is not None:
        parsed.ts = src.on_date(parsed.tod)
    via = h.via or "no header"
    if read_by is not None:
        read_by[via] += 1
    parts = [f"{parsed.outcome:<12}", f"{parsed.engine or '-':<6}", _time(parsed.ts, parsed.tod)]
    ranks = [f"dp={parsed.dp_rank}"] + [f"{k}={v}" for k, v in (("tp", parsed.tp_rank), ("pp", parsed.pp_rank)) if v is not None]
    parts.append(" ".join(ranks))
    parts.append(f"[{via}]")
    parts.append(_what(parsed, h))
    return "  ".join(parts)


def _time(ts: float | None, tod: float | None) -> str:
    if ts is not None:
        t = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f"{ts % 1:.3f}"[1:] + "Z"
        return t
    if tod is not None:
        return f"time of day {int(tod // 3600):02d}:{int(tod % 3600 // 60):02d}:{tod % 60:06.3f} (no date yet)"
    return "no time"


def _what(parsed: ev.Line, h) -> str:
    if parsed.outcome == ev.PARSED:
        return _event(parsed.event)
    if parsed.outcome == ev.UNRECOGNIZED:
        return f"a known message that did not parse: {parsed.reason} (format drift, or a damaged line)"
    msg = h.msg.lstrip()
    if msg.startswith("INFO:"):
        return "an HTTP server line (uvicorn): nothing to read"
    if not msg:
        return "no message"
    if parsed.engine is not None:
        return f"a {parsed.engine} header; the message is not one the exporter reads"
    if h.via:
        return "a header, but no message SGLang or vLLM prints after it"
    return "no header, and no message SGLang or vLLM prints"


def _event(e: object) -> str:
    if not is_dataclass(e):
        return type(e).__name__
    items = []
    for f in fields(e):
        v = getattr(e, f.name)
        if v is None or v == {} or (f.name in ("upper_bound", "swa", "draft", "test", "enabled", "fatal") and v is False):
            continue
        if isinstance(v, float):
            v = f"{v:.6g}"
        elif isinstance(v, dict):
            v = (
                "{"
                + ", ".join(f"{k}: {x:.6g}" if isinstance(x, float) else f"{k}: {x}" for k, x in list(v.items())[:8])
                + (", ..." if len(v) > 8 else "")
                + "}"
            )
        items.append(f"{f.name}={v}")
    text = f"{type(e).__name__}(" + ", ".join(items) + ")"
    return text if len(text) <= MAX_EVENT_TEXT else text[: MAX_EVENT_TEXT - 4] + " ...)"


__all__ = ["describe", "explain_files", "proofs", "write_proofs"]
