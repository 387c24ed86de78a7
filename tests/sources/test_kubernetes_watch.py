"""DaemonSet mode on inotify (issue 23, item 3): the pods directory is watched (one recursive
inotify watch), so a new pod, a restarted container and a deleted pod are seen at once instead of
at the next minute's look; every generation the kubelet keeps is read in order (a container that
crash-looped between two looks has its earlier log read); deleted pods are forgotten on time.
A real ``serve`` in inotify mode over a directory laid out as the kubelet's /var/log/pods. The
bounds are generous (a loaded machine); before, each of these took 60-75 s."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import test_serve_support as h
from test_flags_kubernetes import cri_lines, pod


def _inotify_instances(pid: int) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:inotify"
    return n


def test_pods_seen_at_once_and_every_generation_read(serve, tmp_path):
    root = tmp_path / "pods"
    root.mkdir()
    pod(root, "infer", "old", lines=3)  # running at the start: read from its end
    srv = serve("--kubernetes-pods", str(root), "--kubernetes-forget-after", "600")
    t0 = time.monotonic()
    a = pod(root, "infer", "new-a", lines=4)  # a pod scheduled after the start
    h.wait_count(srv, 4, source="infer/new-a/sglang", timeout=15)
    assert time.monotonic() - t0 < 15  # before: 61.6 s (the next minute's look)

    t0 = time.monotonic()
    h.fsync_append(a / "1.log", cri_lines(100, 2))  # the container restarted
    h.wait_count(srv, 6, source="infer/new-a/sglang", timeout=15)
    assert time.monotonic() - t0 < 15  # before: 60.5 s

    # it crash-loops twice before any look could see the first restart: 2.log and 3.log at once,
    # each read, in order (before: only the newest; the boot failure in 2.log never read)
    h.fsync_append(a / "2.log", cri_lines(200, 3))
    h.fsync_append(a / "3.log", cri_lines(300, 5))
    h.wait_count(srv, 14, source="infer/new-a/sglang", timeout=15)
    assert srv.stderr().index("/sglang/2.log") < srv.stderr().index("/sglang/3.log")
    # one inotify instance for the tree (one per directory would hit max_user_instances, 128)
    assert _inotify_instances(srv.proc.pid) <= 2


def test_deleted_pods_forgotten_on_time(serve, tmp_path):
    root = tmp_path / "pods"
    root.mkdir()
    dirs = [pod(root, "infer", f"p{i}", lines=2) for i in range(40)]
    srv = serve("--kubernetes-pods", str(root), "--from-beginning", "--kubernetes-forget-after", "5")
    h.wait_count(srv, 80, timeout=30)
    for d in dirs:
        shutil.rmtree(d.parent)
    gone = time.monotonic()
    time.sleep(2)
    assert h.value(srv.metrics(), h.DECODE) == 80  # not before the forget delay
    h.wait_for(lambda: 'pod="p' not in srv.metrics(), timeout=20, what="all 40 forgotten")
    took = time.monotonic() - gone
    assert took < 5 + 15, took  # before: 16 of 40 still exported 75 s after their deletion


class _FakeTailer:
    def __init__(self) -> None:
        self.had_file, self.active, self.retired, self.pending = False, None, [], {}


class _FakeManager:
    """What PodLogs asks of the manager: its tailers, add and remove (recorded)."""

    from_beginning = False

    def __init__(self) -> None:
        self.tailers: dict[str, _FakeTailer] = {}
        self.calls: list[tuple[str, str]] = []

    def add(self, source, path, startup):
        self.tailers[os.path.abspath(path)] = _FakeTailer()
        self.calls.append(("add", os.path.basename(path)))

    def remove(self, path, finish=False):
        self.tailers.pop(os.path.abspath(path), None)
        self.calls.append(("remove", os.path.basename(path)))

    def read_whole(self, path) -> None:
        """The tailer of ``path`` opened its file and read it to the end."""
        t = self.tailers[os.path.abspath(path)]
        t.had_file = True


def test_generations_one_at_a_time():
    """Two later starts found at once: the second waits until the first is opened and read
    (before: a generation not opened yet counted as read, and was skipped)."""
    from exporter.sources.kubernetes import PodLogs

    root = Path(tempfile.mkdtemp(prefix="hce-pods-"))
    try:
        d = pod(root, "infer", "a", lines=1)
        m = _FakeManager()
        pl = PodLogs(str(root), m, lambda s: None)
        pl(False)
        assert m.calls == [("add", "0.log")]
        m.read_whole(d / "0.log")
        h.fsync_append(d / "1.log", cri_lines(0, 1))
        h.fsync_append(d / "2.log", cri_lines(0, 1))
        pl(False)
        assert m.calls[1:] == [("remove", "0.log"), ("add", "1.log")]
        assert pl.next_due() <= time.monotonic()  # due: called back each cycle while 2.log waits
        pl(False)
        assert m.calls[3:] == []  # 1.log not opened yet
        m.read_whole(d / "1.log")
        pl(False)
        assert m.calls[3:] == [("remove", "1.log"), ("add", "2.log")]
    finally:
        shutil.rmtree(root, ignore_errors=True)
