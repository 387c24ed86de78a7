"""Helpers for the serve tests: run ``serve`` as a real subprocess, scrape it over HTTP, write logs.

(No tests here; the other ``test_serve_*`` files import it.)
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXE = ROOT / ".venv" / "bin" / "hybrid-cache-exporter"
DECODE = "hybrid_cache_decode_batches_total"
LINES = "hybrid_cache_exporter_lines_total"


def decode_line(i: int) -> str:
    """A real SGLang hybrid-GDN decode line (numbers vary with ``i``)."""
    return (
        f"[2026-08-14 08:{17 + i // 3600 % 40:02d}:{i % 60:02d} TP0] Decode batch, #running-req: {i % 50}, #full token: {1000 + i % 997}, "
        f"full token usage: 0.20, mamba num: 16, mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"
    )


FIXED = (
    "[2026-08-14 08:17:30 TP0] Decode batch, #running-req: 4, #full token: 1051, full token usage: 0.20, mamba num: 16, "
    "mamba usage: 0.20, cuda graph: True, gen throughput (token/s): 453.12, #queue-req: 0"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lines_blob(start: int, n: int, fixed: bool = False) -> bytes:
    return "".join((FIXED if fixed else decode_line(i)) + "\n" for i in range(start, start + n)).encode()


def listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds the socket listening on ``port`` (Linux /proc; True where it
    cannot be told)."""
    inodes = set()
    try:
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            with open(table) as f:
                for row in f.read().splitlines()[1:]:
                    cols = row.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                        inodes.add(f"socket:[{cols[9]}]")
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return True
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
    return False


class Serve:
    """A running ``hybrid-cache-exporter serve`` subprocess.

    Its port is found free (``free_port``) and bound by the exporter a moment later: another test's
    exporter may take it in between. ``wait_up`` therefore waits for *this* process to listen on it
    (not for whoever answers there), and starts it again on another port when it could not listen."""

    def __init__(self, tmp: Path, *args: str, stdin=None, port: int | None = None, prefix: tuple[str, ...] = ()) -> None:
        self.tmp, self.args, self.stdin, self.prefix, self.fixed_port = tmp, args, stdin, prefix, port is not None
        self._start(port or free_port())

    def _start(self, port: int) -> None:
        self.port = port
        self.err_path = self.tmp / f"serve-{self.port}-{time.monotonic_ns()}.log"
        self.err = open(self.err_path, "wb")  # noqa: SIM115
        cmd = [*self.prefix, str(EXE), "serve", "--listen", f"127.0.0.1:{self.port}", *self.args]
        self.proc = subprocess.Popen(cmd, stdin=self.stdin, stdout=subprocess.DEVNULL, stderr=self.err)
        self.base = f"http://127.0.0.1:{self.port}"

    def wait_up(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        tries = 3
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                lost_port = self.proc.returncode == 1 and "cannot listen" in self.stderr()
                if lost_port and not getattr(self, "fixed_port", True) and tries > 0:
                    tries -= 1  # the port was taken between free_port() and the exporter's bind
                    self.err.close()
                    self._start(free_port())
                    continue
                raise AssertionError(f"serve exited with {self.proc.returncode}: {self.stderr()}")
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=2) as r:
                    up = r.status == 200
            except OSError:
                up = False
            if up and listens(self.proc.pid, self.port):
                # /healthz answers before the files found at start are opened; any other page waits for
                # that start-up read (web.py's warm): a test's first append is then read, not tailed past
                with contextlib.suppress(OSError):  # 401 with auth, 503 while bcrypt is busy: up all the same
                    urllib.request.urlopen(self.base + "/", timeout=15).close()
                return
            time.sleep(0.05)
        raise AssertionError("serve did not come up: " + self.stderr())

    def stderr(self) -> str:
        if not self.err.closed:
            self.err.flush()
        return self.err_path.read_text(errors="replace")

    scrape_timeout = 5.0  # seconds a request may take (a test of a huge exposition gives more)

    def get(self, path: str = "/metrics") -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=self.scrape_timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def metrics(self) -> str:
        code, body = self.get("/metrics")
        assert code == 200, body
        return body

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise AssertionError("serve did not stop on signal " + str(sig)) from None
        self.err.close()
        return self.proc.returncode

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
        with contextlib.suppress(Exception):
            self.err.close()


def value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels`` (0 when absent)."""
    total = 0.0
    for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, re.M):
        lab = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1) or ""))
        if all(lab.get(k) == v for k, v in labels.items()):
            total += float(m.group(2))
    return total


def wait_count(srv: Serve, expected: int, name: str = DECODE, timeout: float = 20, every: float = 0.05, **labels: str) -> str:
    """Poll /metrics (every ``every`` seconds) until ``name`` reaches ``expected`` and nothing is
    left to read, then assert the exact count (a count above ``expected`` fails immediately: a
    line was read twice)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise AssertionError(f"serve exited with {srv.proc.returncode}: {srv.stderr()}")
        try:
            text = srv.metrics()
        except OSError as e:  # the scrape failed: what the exporter said is the evidence
            raise AssertionError(f"scraping /metrics failed: {e!r}; serve's exit code {srv.proc.poll()}\n{srv.stderr()}") from e
        n = value(text, name, **labels)
        assert n <= expected, f"{name} = {n} > {expected}: lines counted twice\n{srv.stderr()}"
        lag = value(text, "hybrid_cache_exporter_read_lag_bytes")
        if n == expected and lag == 0:
            return text
        time.sleep(every)
    raise AssertionError(f"{name} = {value(text, name, **labels)}, expected {expected}\n{srv.stderr()}")


def wait_for(pred, timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


WRITER = r"""
import os, sys, shutil, time
sys.path.insert(0, sys.argv[1])
from test_serve_support import decode_line
path, mode, n, chunk = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
f = open(path, "a")
i = 0
rot = 0
chunks = 0
while i < n:
    chunks += 1
    for _ in range(chunk):
        if i >= n:
            break
        f.write(decode_line(i) + "\n")
        i += 1
    f.flush()
    if mode == "none":
        pass
    elif mode == "rename" and i < n and chunks % 4 == 0:
        rot += 1
        os.replace(path, f"{path}.{rot}")
        f.write(decode_line(i) + "\n")  # a late write to the old file, after the rename
        i += 1
        f.close()
        f = open(path, "a")
    elif mode == "copytruncate" and i < n and chunks % 4 == 0:
        rot += 1
        shutil.copyfile(path, f"{path}.{rot}")
        os.truncate(path, 0)
f.close()
print(i, flush=True)
"""


def run_writer(path: Path, mode: str, n: int, chunk: int = 50) -> subprocess.Popen:
    """A separate process that appends ``n`` decode lines at full speed, rotating every 4 chunks."""
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(Path(__file__).parent), str(path), mode, str(n), str(chunk)],
        stdout=subprocess.PIPE,
        text=True,
    )


def count_lines_before(path: Path, offset: int) -> int:
    with open(path, "rb") as f:
        return f.read(offset).count(b"\n")


def fsync_append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
