"""Writers and drivers for the rotation tests: a steady writer process (Python ``logging``), the
real ``/usr/sbin/logrotate`` between its writes, and writers that rotate the way Docker's
json-file driver and the kubelet do. (No tests here.)

Every line the writers write is an SGLang decode line carrying a unique sequence number (in the
throughput field), so a test can tell which lines lie before a saved offset.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import ci_support

LOGROTATE = shutil.which("logrotate") or ("/usr/sbin/logrotate" if os.path.exists("/usr/sbin/logrotate") else None)
needs_logrotate = ci_support.needs(LOGROTATE is not None, "logrotate not installed (make tools installs it)")

SEQ = re.compile(rb"gen throughput \(token/s\): (\d+)\.00")


def seq_line(i: int) -> str:
    """A real SGLang hybrid-GDN decode line whose throughput field is the sequence number ``i``."""
    return (
        f"[2026-08-14 08:{17 + i // 3600 % 40:02d}:{i % 60:02d} TP0] Decode batch, #running-req: {i % 50}, #full token: {1000 + i % 997}, "
        f"full token usage: 0.20, mamba num: 16, mamba usage: 0.20, cuda graph: True, gen throughput (token/s): {i}.00, #queue-req: 0"
    )


LINE_BYTES = len(seq_line(0)) + 1  # the shortest line the writers write


def wait_grown(path: Path, lines: int, timeout: float = 30) -> None:
    """Until the file at ``path`` holds at least ``lines`` lines (by its size; a rotation leaves it
    empty): each generation gets lines however slow the machine, not what a fixed sleep allows."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if path.stat().st_size >= lines * LINE_BYTES:
                return
        except FileNotFoundError:
            pass  # between logrotate's rename and its create
        assert time.monotonic() < deadline, f"{path} did not grow to {lines} lines"
        time.sleep(0.005)


# A steady writer: logging.FileHandler (copytruncate, copy) or WatchedFileHandler (create), a batch
# of lines every few ms until told to stop. ``<ctl>.pause`` asks it to pause (it acknowledges with
# ``<ctl>.paused``); ``<ctl>.stop`` stops it; it prints how many lines it wrote.
WRITER = r"""
import logging, logging.handlers, os, sys, time
sys.path.insert(0, sys.argv[1])
from rotation_support import seq_line
path, kind, ctl, batch = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
h = logging.handlers.WatchedFileHandler(path) if kind == "watched" else logging.FileHandler(path)
h.setFormatter(logging.Formatter("%(message)s"))
lg = logging.getLogger("writer")
lg.addHandler(h)
lg.setLevel(logging.INFO)
lg.propagate = False
i = 0
while not os.path.exists(ctl + ".stop"):
    if os.path.exists(ctl + ".pause"):
        open(ctl + ".paused", "w").close()
        while os.path.exists(ctl + ".pause") and not os.path.exists(ctl + ".stop"):
            time.sleep(0.002)
        os.unlink(ctl + ".paused")
        continue
    for _ in range(batch):
        lg.info(seq_line(i))
        i += 1
    time.sleep(0.004)
h.close()
print(i, flush=True)
"""


class Writer:
    """The steady writer process, with pause/resume/stop by control files."""

    def __init__(self, path: Path, kind: str = "plain", batch: int = 8) -> None:
        self.ctl = str(path) + ".ctl"
        for suffix in (".stop", ".pause", ".paused"):
            if os.path.exists(self.ctl + suffix):
                os.unlink(self.ctl + suffix)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(Path(__file__).parent), str(path), kind, self.ctl, str(batch)],
            stdout=subprocess.PIPE,
            text=True,
        )

    def pause(self) -> None:
        Path(self.ctl + ".pause").touch()
        deadline = time.monotonic() + 20
        while not os.path.exists(self.ctl + ".paused"):
            assert self.proc.poll() is None, "writer died"
            assert time.monotonic() < deadline, "writer did not pause"
            time.sleep(0.002)

    def resume(self) -> None:
        os.unlink(self.ctl + ".pause")

    def stop(self) -> int:
        Path(self.ctl + ".stop").touch()
        out, _ = self.proc.communicate(timeout=30)
        return int(out)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


def decode_batches(pipe, source: str | None = None) -> float:
    """The decode lines a pipeline (exporter.state.pipeline.Pipeline) counted, of one source or of all."""
    with pipe.lock:
        return sum(
            s.counters.get("decode_batches", 0.0)
            for name, src in pipe.sources.items()
            if source in (None, name)
            for s in src.servers.values()
        )


class Logrotate:
    """The real logrotate with its own config and state file in a temporary directory."""

    def __init__(self, tmp: Path, log: Path, directives: str) -> None:
        self.conf = tmp / "logrotate.conf"
        self.state = tmp / "logrotate.state"
        self.conf.write_text(f"{log} {{\n{directives}\n    missingok\n}}\n")
        self.runs = 0

    def rotate(self, writer: Writer | None = None) -> None:
        """One forced rotation. With ``writer``: paused around it, because logrotate's own
        copytruncate loses what is written between its copy and its truncation (documented)."""
        if writer is not None:
            writer.pause()
        try:
            r = subprocess.run([LOGROTATE, "-f", "-s", str(self.state), str(self.conf)], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            self.runs += 1
        finally:
            if writer is not None:
                writer.resume()


def seqs(data: bytes) -> set[int]:
    """The sequence numbers of the writers' lines in ``data``."""
    return {int(m.group(1)) for m in SEQ.finditer(data)}


def seqs_in(path: Path) -> set[int]:
    """The sequence numbers of the lines in the file at ``path`` (a ``.gz`` decompressed)."""
    data = path.read_bytes()
    return seqs(gzip.decompress(data) if path.name.endswith(".gz") else data)


def covered(directory: Path, entries: list[dict]) -> set[int]:
    """Sequence numbers of the lines the saved positions ``entries`` cover: those before each
    one's offset, in its content (found in ``directory`` by inode and first bytes, else by first
    bytes: renamed and compressed since). A generation read in part need not be the newest one
    read: a rotated file's last lines may be read after the first lines of the new one, so the
    covered lines are a set, not all the lines before some first unread one."""
    by_ino, contents = {}, []
    for p in directory.iterdir():
        if p.is_file():
            data = gzip.decompress(p.read_bytes()) if p.name.endswith(".gz") else p.read_bytes()
            by_ino[p.stat().st_ino] = data
            contents.append(data)
    out: set[int] = set()
    for e in entries:
        if e["offset"] == 0:
            continue
        if e["ino"] in by_ino and hashlib.sha1(by_ino[e["ino"]][: e["fp_len"]]).hexdigest() == e["fp"]:
            data = by_ino[e["ino"]]
        else:
            found = [c for c in contents if len(c) >= e["fp_len"] and hashlib.sha1(c[: e["fp_len"]]).hexdigest() == e["fp"]]
            assert found, f"saved generation (inode {e['ino']}) not found"
            data = max(found, key=len)
        out |= seqs(data[: e["offset"]])
    return out


def positions_of(pos: Path, log: Path) -> list[dict]:
    return json.loads(pos.read_text())["files"][str(log)]


# Writers that rotate by themselves the way container runtimes do, at a given rate.
CONTAINER_WRITER = r"""
import gzip, json, os, shutil, sys, time
sys.path.insert(0, sys.argv[1])
from rotation_support import seq_line
path, style, rotations, per, max_files, compress, interval = (
    sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7] == "1", float(sys.argv[8]))
d = os.path.dirname(path)
clock = 1786090650  # a fake wall clock: the kubelet names rotated files by second

def record(i):
    line = seq_line(i)
    if style == "docker":
        return json.dumps({"log": line + "\n", "stream": "stderr", "time": "2026-08-14T08:17:30.123456789Z"}) + "\n"
    return "2026-08-14T08:17:30.123456789Z stderr F " + line + "\n"

def gz(src):
    with open(src, "rb") as f, gzip.open(src + ".gz", "wb") as g:
        shutil.copyfileobj(f, g)
    shutil.copystat(src, src + ".gz")
    os.unlink(src)

i = 0
f = open(path, "a")
for r in range(rotations + 1):
    for _ in range(per):
        f.write(record(i))
        i += 1
    f.flush()
    if r == rotations:
        break
    if style == "docker":  # moby loggerutils: shift .N-1 -> .N, name -> .1, then compress .1
        ext = ".gz" if compress else ""
        last = f"{path}.{max_files - 1}{ext}"
        if os.path.exists(last):
            os.unlink(last)
        for n in range(max_files - 2, 0, -1):
            if os.path.exists(f"{path}.{n}{ext}"):
                os.rename(f"{path}.{n}{ext}", f"{path}.{n + 1}{ext}")
        os.rename(path, path + ".1")
        f.close()
        f = open(path, "a")
        if compress:
            gz(path + ".1")
    else:  # kubelet: 0.log -> 0.log.<YYYYmmdd-HHMMSS>, the runtime reopens; older ones compressed
        clock += 1
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(clock))
        os.rename(path, f"{path}.{stamp}")
        f.close()
        f = open(path, "a")
        rotated = sorted(n for n in os.listdir(d) if n.startswith(os.path.basename(path) + ".") and not n.endswith(".ctl"))
        if compress:
            for n in rotated[:-1]:
                if not n.endswith(".gz"):
                    gz(os.path.join(d, n))
            rotated = sorted(n for n in os.listdir(d) if n.startswith(os.path.basename(path) + "."))
        for n in rotated[: max(0, len(rotated) - (max_files - 1))]:
            os.unlink(os.path.join(d, n))
    time.sleep(interval)
f.close()
print(i, flush=True)
"""


def run_container_writer(
    path: Path, style: str, rotations: int, per: int, max_files: int, compress: bool, interval: float
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            CONTAINER_WRITER,
            str(Path(__file__).parent),
            str(path),
            style,
            str(rotations),
            str(per),
            str(max_files),
            "1" if compress else "0",
            str(interval),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
