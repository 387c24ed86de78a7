"""Basic auth without side channels: an unknown user costs the same bcrypt as a known one, and a
flood of bad credentials (bcrypt work bounded by a small pool) does not starve authorised scrapes.
Real bcrypt, a real HTTP server on 127.0.0.1; no tight timing assertion."""

from __future__ import annotations

import base64
import contextlib
import http.client
import os
import threading
import time
import urllib.error
import urllib.request

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Counter

from exporter.exposition import webconfig
from exporter.exposition.web import App, make_server
from exporter.exposition.webconfig import WebConfig


def basic(user: str, pw: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()


@pytest.fixture
def recorded(monkeypatch):
    """The hashes bcrypt.checkpw is called with."""
    seen: list[bytes] = []
    real = bcrypt.checkpw

    def spy(pw: bytes, h: bytes) -> bool:
        seen.append(h)
        return real(pw, h)

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", spy)
    return seen


@pytest.mark.parametrize("cost", [5, 9])
def test_an_unknown_user_is_checked_against_a_hash_of_the_same_cost(recorded, cost: int) -> None:
    h = bcrypt.hashpw(b"secret", bcrypt.gensalt(cost))
    cfg = WebConfig(users={"prom": h})
    assert not cfg.check_auth(basic("nobody", "secret"))
    assert not cfg.check_auth(basic("prom", "wrong"))
    assert cfg.check_auth(basic("prom", "secret"))
    assert len(recorded) == 3
    dummy, known = recorded[0], recorded[1]
    assert known == h and dummy != h
    assert webconfig._cost(dummy) == webconfig._cost(known) == cost
    assert bcrypt.checkpw(b"", dummy) is False  # a real hash, of nothing a client could send


def test_the_dummy_takes_the_cost_most_users_have(recorded) -> None:
    users = {u: bcrypt.hashpw(b"x", bcrypt.gensalt(c)) for u, c in (("a", 6), ("b", 6), ("c", 4))}
    cfg = WebConfig(users=users)
    cfg.check_auth(basic("zz", "x"))
    assert webconfig._cost(recorded[-1]) == 6


def test_outcomes_are_cached_failures_too(recorded) -> None:
    cfg = WebConfig(users={"prom": bcrypt.hashpw(b"secret", bcrypt.gensalt(4))})
    for _ in range(5):
        assert cfg.check_auth(basic("prom", "secret"))
        assert not cfg.check_auth(basic("prom", "bad"))
        assert not cfg.check_auth(basic("ghost", "bad"))
    assert len(recorded) == 3


def test_bcrypt_runs_in_a_bounded_pool(monkeypatch) -> None:
    """However many requests check at once, at most the pool's size run bcrypt together."""
    monkeypatch.setattr(webconfig, "BCRYPT_GATE", webconfig.BcryptGate(2, queue=64))
    active = peak = 0
    lock = threading.Lock()
    real = bcrypt.checkpw

    def counting(pw: bytes, h: bytes) -> bool:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        try:
            return real(pw, h)
        finally:
            with lock:
                active -= 1

    monkeypatch.setattr(webconfig.bcrypt, "checkpw", counting)
    cfg = WebConfig(users={"prom": bcrypt.hashpw(b"secret", bcrypt.gensalt(8))})
    threads = [threading.Thread(target=cfg.check_auth, args=(basic("prom", f"bad{i}"),)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak <= 2


@pytest.mark.serial  # timed bounds or a load of its own: run alone (Makefile's test target)
def test_a_flood_of_bad_passwords_does_not_starve_authorised_scrapes() -> None:
    h = bcrypt.hashpw(b"secret", bcrypt.gensalt(8)).decode()
    cfg = WebConfig(users={"prom": h.encode()})
    reg = CollectorRegistry()
    Counter("demo", "demo", registry=reg).inc()
    server = make_server("127.0.0.1:0", App(reg, lambda: (True, []), lambda: [], cfg))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    stop = threading.Event()
    refused = [0]

    def get(auth: str) -> int:
        req = urllib.request.Request(url, headers={"Authorization": auth})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def flood(i: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            assert get(basic("prom" if n % 2 else f"user{i}", os.urandom(6).hex())) in (401, 503)  # 503: bcrypt busy
            refused[0] += 1

    flooders = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(8)]
    try:
        for t in flooders:
            t.start()
        time.sleep(0.5)  # the flood is under way before the first authorised scrape
        t0 = time.monotonic()
        codes = []
        for _ in range(8):
            codes.append(get(basic("prom", "secret")))
            time.sleep(0.2)
        took = time.monotonic() - t0
    finally:
        stop.set()
        for t in flooders:
            t.join(timeout=60)
        server.shutdown()
        server.server_close()
    assert codes == [200] * 8
    assert took < 60, took  # generous: the first scrape waits its turn in the pool, the rest are cached
    assert refused[0] >= 8  # the flood went on all along


def test_a_verified_credential_is_never_evicted_by_failures(recorded, monkeypatch) -> None:
    """Distinct wrong passwords beyond the cache's size evict the oldest failures only: the good
    credential is never checked again (before: the cache was wiped whole when full)."""
    monkeypatch.setattr(webconfig, "AUTH_CACHE", 50)
    cfg = WebConfig(users={"prom": bcrypt.hashpw(b"secret", bcrypt.gensalt(4))})
    assert cfg.check_auth(basic("prom", "secret"))
    for i in range(200):
        assert cfg.check_auth(basic("prom", f"wrong{i}"), "10.0.0.9") is False
    n = len(recorded)
    assert cfg.check_auth(basic("prom", "secret"))
    assert len(recorded) == n  # no bcrypt: remembered
    assert len(cfg._auth.bad) == 50


def test_the_gate_serves_the_fewest_failures_first() -> None:
    """With the slot busy and the queue full of requests from an address with many failures, a
    newcomer from a clean address takes the place of the worst one and gets the next slot."""
    gate = webconfig.BcryptGate(1, queue=2)
    assert gate.acquire((1, 0.0), 1)  # the slot is busy
    order: list[str] = []

    def wait(name: str, prio) -> None:
        order.append(name if gate.acquire(prio, 10) else name + " refused")
        if not order[-1].endswith("refused"):
            gate.release()

    flood = [threading.Thread(target=wait, args=(f"f{i}", (1, 50.0))) for i in range(2)]
    for i, t in enumerate(flood):  # f0 then f1, in that order
        t.start()
        deadline = time.monotonic() + 10
        while len(gate.waiting) < i + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
    third = threading.Thread(target=wait, args=("f2", (1, 50.0)))
    third.start()
    third.join(10)
    assert order == ["f2 refused"]  # the queue is full of requests as good as this one
    clean = threading.Thread(target=wait, args=("scraper", (1, 0.0)))
    clean.start()
    deadline = time.monotonic() + 10
    while len(order) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order[1] == "f1 refused"  # the newest of the worst gave its place
    gate.release()
    for t in [*flood, clean]:
        t.join(10)
    assert order[2] == "scraper"  # first in line for the free slot


def test_concurrent_checks_of_one_credential_share_one_bcrypt(recorded) -> None:
    cfg = WebConfig(users={"prom": bcrypt.hashpw(b"secret", bcrypt.gensalt(8))})
    out: list = []
    threads = [threading.Thread(target=lambda: out.append(cfg.check_auth(basic("prom", "secret")))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert out == [True] * 6
    assert len(recorded) <= 2  # the dummy-hash warm-up aside, one check


@pytest.mark.serial  # timed bounds or a load of its own: run alone (Makefile's test target)
def test_a_flood_of_distinct_wrong_passwords_locks_nobody_out(serve, tmp_path) -> None:
    """Through a real serve, bcrypt cost 10: 100 threads of distinct wrong passwords from one
    address. The scraper verified before the flood gets 200 every time (before: 401 twice), and a
    scraper not verified yet, from another address, gets 200 at its first try (before: 401); one
    from the flood's own address (nothing tells its first try from the flood's) at its retry."""
    h_ = bcrypt.hashpw(b"secret", bcrypt.gensalt(10)).decode()
    cfg = tmp_path / "web.yml"
    cfg.write_text(f"basic_auth_users:\n  prom: {h_}\n  other: {h_}\n  third: {h_}\n")
    log = tmp_path / "s.log"
    log.touch()
    srv = serve("--log", str(log), "--web.config.file", str(cfg))

    def get(user: str, pw: str, source: str = "127.0.0.1") -> int:
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30, source_address=(source, 0))
        try:
            c.request("GET", "/metrics", headers={"Authorization": basic(user, pw), "Connection": "close"})
            r = c.getresponse()
            r.read()
            return r.status
        finally:
            c.close()

    assert get("prom", "secret") == 200  # verified before the flood
    stop = threading.Event()
    flood_codes: list[int] = []

    def flood() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                flood_codes.append(get("prom", os.urandom(8).hex()))

    flooders = [threading.Thread(target=flood, daemon=True) for _ in range(100)]
    verified: list[int] = []
    try:
        for t in flooders:
            t.start()
        time.sleep(2.0)  # the flood is under way, the failures counted against its address
        fresh = get("other", "secret", source="127.0.0.2")
        same = [get("third", "secret")]
        if same[0] == 503:  # not checked (answered at once, not 401): the retry goes first
            same.append(get("third", "secret"))
        for _ in range(10):
            verified.append(get("prom", "secret"))
            time.sleep(0.2)
    finally:
        stop.set()
        for t in flooders:
            t.join(60)
    assert verified == [200] * 10
    assert fresh == 200
    assert same[-1] == 200 and len(same) <= 2, same
    assert flood_codes and set(flood_codes) <= {401, 503}
