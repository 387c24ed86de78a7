"""Basic auth without side channels: an unknown user costs the same bcrypt as a known one, and a
flood of bad credentials (bcrypt work bounded by a small pool) does not starve authorised scrapes.
Real bcrypt, a real HTTP server on 127.0.0.1; no tight timing assertion."""

from __future__ import annotations

import base64
import os
import threading
import time
import urllib.error
import urllib.request

import bcrypt
import pytest
from prometheus_client import CollectorRegistry, Counter

from exporter import webconfig
from exporter.web import App, make_server
from exporter.webconfig import WebConfig


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
    monkeypatch.setattr(webconfig, "BCRYPT_POOL", threading.BoundedSemaphore(2))
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
            assert get(basic("prom" if n % 2 else f"user{i}", os.urandom(6).hex())) == 401
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
