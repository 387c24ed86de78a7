"""Random sequences of writes, real logrotate runs, exporter looks and exporter restarts, stepped
by hand (the tailer's cycle called in-process, so every interleaving is reproducible by its seed).
Whatever the order, every line written is counted exactly once, as long as logrotate did not
delete a generation the exporter never had a chance to look at (at most two rotations between
two looks with ``rotate 3``)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess

import pytest
import rotation_support as rs

from exporter.sources import Manager, Positions
from exporter.state.pipeline import Pipeline

pytestmark = rs.needs_logrotate

DIRECTIVES = {
    "copytruncate": "    rotate 3\n    copytruncate\n    compress\n    delaycompress",
    "create": "    rotate 3\n    create\n    compress\n    delaycompress",
}


class Exporter:
    """The tailer without its thread: ``look()`` is one cycle, ``restart()`` a SIGTERM + start."""

    def __init__(self, log: str, positions: str | None, poll: bool) -> None:
        self.log, self.positions, self.poll = log, positions, poll
        self.counted = 0.0
        self._start()

    def _start(self) -> None:
        self.pipe = Pipeline()
        pos = Positions(self.positions) if self.positions else None
        self.m = Manager(self.pipe, [(None, self.log)], from_beginning=True, positions=pos, poll_interval=100 if self.poll else 0)
        self.m.mode = "poll"  # every look lists the directory and reads every file
        if pos is not None:
            self.m.saved = pos.load()
            self.m.saved_at_ns = pos.saved_at_ns
        self.m._discover(startup=True)

    def look(self) -> None:
        self.m._cycle()

    def _count(self) -> float:
        self.pipe.finish()
        return rs.decode_batches(self.pipe)

    def restart(self) -> None:
        for t in self.m.tailers.values():
            t.parse(None)
        self.m.save()
        for t in self.m.tailers.values():
            t.close()
        self.counted += self._count()
        self._start()
        self.look()  # serve's first cycle runs at once

    def total(self) -> float:
        for _ in range(3):
            self.look()
        for t in self.m.tailers.values():
            t.housekeeping(float("inf"))
        return self.counted + self._count()


def _run(tmp, seed: int, mode: str, restarts: bool) -> tuple[int, float, str]:
    """Returns (lines the exporter must count, lines it counted, the ops)."""
    rnd = random.Random(seed)
    log = tmp / "server.log"
    log.touch()
    lr = rs.Logrotate(tmp, log, DIRECTIVES[mode])
    f = open(log, "a")  # noqa: SIM115
    i = 0
    # generations rotated before the exporter first starts are not its to read (only the file at
    # the path is, from its beginning): later copies and compressions of them must not be either
    for _ in range(seed % 3):
        for _ in range(rnd.randint(1, 20)):
            f.write(rs.seq_line(i) + "\n")
            i += 1
        f.flush()
        subprocess.run([rs.LOGROTATE, "-f", "-s", str(lr.state), str(lr.conf)], check=True, timeout=60)
        if mode == "create":
            f.close()
            f = open(log, "a")  # noqa: SIM115
    before = i
    ex = Exporter(str(log), str(tmp / "pos.json") if restarts else None, poll=True)
    ops: list[str] = []
    for _ in range(16):
        op = rnd.choice("wwrcs" if restarts else "wwrc")
        since_look = ops[max([k for k, o in enumerate(ops) if o in "cs"], default=-1) + 1 :]
        if op == "r" and since_look.count("r") >= 2:
            op = "c"  # logrotate would delete a generation never looked at: out of anyone's reach
        ops.append(op)
        if op == "w":
            for _ in range(rnd.randint(1, 40)):
                f.write(rs.seq_line(i) + "\n")
                i += 1
            f.flush()
        elif op == "r":
            subprocess.run([rs.LOGROTATE, "-f", "-s", str(lr.state), str(lr.conf)], check=True, timeout=60)
            if mode == "create":
                # like WatchedFileHandler: a few late lines into the renamed file, then reopen
                for _ in range(rnd.randint(0, 3)):
                    f.write(rs.seq_line(i) + "\n")
                    i += 1
                f.close()
                f = open(log, "a")  # noqa: SIM115
        elif op == "c":
            ex.look()
        else:
            ex.restart()
    f.close()
    return i - before, ex.total(), "".join(ops)


@pytest.mark.parametrize("restarts", [False, True], ids=["running", "with-restarts"])
@pytest.mark.parametrize("mode", list(DIRECTIVES))
def test_random_sequences_exact(tmp_path, mode, restarts):
    for seed in range(int(os.environ.get("HCE_ROTATION_SEEDS", "12"))):
        d = tmp_path / f"seed{seed}"
        d.mkdir()
        written, counted, ops = _run(d, seed, mode, restarts)
        assert counted == written, f"seed {seed}: ops {ops}: {written} lines written, {counted} counted"


def test_copy_seen_before_a_stop_holds_the_rest(tmp_path):
    """copytruncate interrupted by a stop: the copy was listed (remembered as looked at) while
    lines in it were still unread, the truncation happened while the exporter was down. After the
    restart the copy still gives the rest of the saved generation."""
    log, pos = tmp_path / "server.log", tmp_path / "pos.json"
    with open(log, "w") as f:
        f.write("".join(rs.seq_line(i) + "\n" for i in range(30)))
    ex = Exporter(str(log), str(pos), poll=True)
    ex.look()
    with open(log, "a") as f:
        f.write("".join(rs.seq_line(i) + "\n" for i in range(30, 50)))  # not read before the stop
    shutil.copyfile(log, str(log) + ".1")
    t = ex.m.tailers[str(log)]
    ex.m.dir_of(t).refresh()  # the copy is listed and looked at, the file is not read again
    t.consider_pending()
    ex.m.save()
    for tt in ex.m.tailers.values():
        tt.close()
    first = ex._count()
    assert first == 30
    os.truncate(log, 0)  # logrotate finishes while the exporter is down
    with open(log, "a") as f:
        f.write("".join(rs.seq_line(i) + "\n" for i in range(50, 55)))
    ex2 = Exporter(str(log), str(pos), poll=True)
    assert first + ex2.total() == 55
