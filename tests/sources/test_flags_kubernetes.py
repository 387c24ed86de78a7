"""DaemonSet mode on a real ``serve`` over a directory laid out as the kubelet's /var/log/pods:
namespace/pod/container labels from the path, the include filter, the bound on sources (the rest
counted), a container restart continuing the same source, and a deleted pod's series forgotten."""

from __future__ import annotations

import shutil

import test_serve_support as h

from exporter.sources.kubernetes import parse_path, scan

CRI = "2026-08-14T08:17:{s:02d}.123456789Z stderr F {line}\n"


def cri_lines(start: int, n: int) -> bytes:
    return "".join(CRI.format(s=i % 60, line=h.decode_line(i)) for i in range(start, start + n)).encode()


def pod(root, ns: str, name: str, container: str = "sglang", n: int = 0, lines: int = 3, start: int = 0):
    d = root / f"{ns}_{name}_0d5c7e2a-1111-4a4a-9c9c-{abs(hash(name)) % 10**12:012d}" / container
    d.mkdir(parents=True, exist_ok=True)
    h.fsync_append(d / f"{n}.log", cri_lines(start, lines))
    return d


def test_parse_path_and_scan(tmp_path):
    assert parse_path("/var/log/pods/infer_sglang-0_0d5c7e2a-1111-4a4a-9c9c-000000000001/sglang/3.log") == ("infer", "sglang-0", "sglang")
    assert parse_path("/var/log/pods/infer_sglang-0_uid/sglang/3.log.20260814-081700") is None
    assert parse_path("/var/log/containers/x.log") is None
    d = pod(tmp_path, "infer", "a", n=0)
    h.fsync_append(d / "1.log", b"x\n")
    h.fsync_append(d / "0.log.20260814-081700", b"x\n")
    (tmp_path / "not-a-pod-dir").mkdir()
    found = scan(str(tmp_path))
    assert list(found) == ["infer/a/sglang"] and found["infer/a/sglang"].path.endswith("/1.log")


def test_daemonset_mode(tmp_path):
    root = tmp_path / "pods"
    root.mkdir()
    a = pod(root, "infer", "qwen-a", lines=3)
    pod(root, "infer", "qwen-a", container="istio-proxy", lines=5)  # excluded by --kubernetes-include
    b = pod(root, "batch", "qwen-b", lines=4)
    s = h.Serve(
        tmp_path,
        "--kubernetes-pods",
        str(root),
        "--kubernetes-include",
        "/sglang$",
        "--kubernetes-max-sources",
        "2",
        "--kubernetes-forget-after",
        "0.5",
        "--from-beginning",
        "--poll-interval",
        "0.1",
        "--label",
        "cluster=c1",
    )
    try:
        s.wait_up()
        h.wait_count(s, 3, source="infer/qwen-a/sglang")
        text = h.wait_count(s, 7)
        assert h.value(text, h.DECODE, namespace="infer", pod="qwen-a", container="sglang", cluster="c1") == 3
        assert h.value(text, h.DECODE, namespace="batch", pod="qwen-b", container="sglang") == 4
        assert "istio-proxy" not in text
        # self-metrics carry the pod too
        assert h.value(text, "hybrid_cache_exporter_source_up", namespace="batch", pod="qwen-b") == 1
        assert h.value(text, "hybrid_cache_exporter_sources_over_limit") == 0

        # a third pod: over the bound of 2, counted and not read
        c = pod(root, "infer", "qwen-c", lines=2, start=100)
        h.wait_for(lambda: h.value(s.metrics(), "hybrid_cache_exporter_sources_over_limit") == 1, what="over limit 1")
        assert 'pod="qwen-c"' not in s.metrics()

        # the container of pod a restarts: 1.log continues the same source
        h.fsync_append(a / "1.log", cri_lines(10, 2))
        h.wait_count(s, 5, source="infer/qwen-a/sglang")

        # pod b is deleted: after --kubernetes-forget-after its series go, and pod c gets the slot
        shutil.rmtree(b.parent)
        h.wait_for(lambda: 'pod="qwen-b"' not in s.metrics(), what="pod b forgotten")
        h.wait_count(s, 2, source="infer/qwen-c/sglang")
        text = s.metrics()
        assert h.value(text, "hybrid_cache_exporter_sources_over_limit") == 0
        assert h.value(text, h.DECODE, namespace="infer", pod="qwen-c") == 2
        assert c.exists()
        assert "forgotten" in s.stderr()
        code, status = s.get("/status.json")
        assert code == 200 and "qwen-b" not in status and "qwen-a" in status  # its timelines and tailer went too
    finally:
        s.kill()


def test_forget_drops_state_and_timelines(tmp_path):
    """Service._forget (a pod gone for --kubernetes-forget-after) leaves nothing of the source behind."""
    from exporter.serve import ServeConfig, Service

    root = tmp_path / "pods"
    root.mkdir()
    svc = Service(ServeConfig(listen="127.0.0.1:0", kubernetes_pods=str(root)))
    try:
        for name in ("ns/a/sglang", "ns/b/sglang"):
            svc.pipe.source(name)
            for i in range(30):
                svc.pipe.feed(name, h.decode_line(i * 11))
        svc.pipe.finish()
        assert {k[0] for k in svc.history.timelines} == {"ns/a/sglang", "ns/b/sglang"}
        svc._forget("ns/b/sglang")
        assert set(svc.pipe.sources) == {"ns/a/sglang"}
        assert {k[0] for k in svc.history.timelines} == {"ns/a/sglang"}
    finally:
        for srv in svc.servers:
            srv.server_close()


def test_kubelet_glob_means_daemonset_mode(tmp_path):
    """--log '<...>/pods/*/*/*.log' is recognised: the same labels as --kubernetes-pods (not every
    container's 0.log collapsed into one source named "0")."""
    root = tmp_path / "pods"
    pod(root, "infer", "qwen-a", lines=3)
    pod(root, "batch", "qwen-b", lines=2)
    s = h.Serve(tmp_path, "--log", f"{root}/*/*/*.log", "--from-beginning", "--poll-interval", "0.1")
    try:
        s.wait_up()
        text = h.wait_count(s, 5)
        assert h.value(text, h.DECODE, namespace="infer", pod="qwen-a", container="sglang", source="infer/qwen-a/sglang") == 3
        assert h.value(text, h.DECODE, namespace="batch", pod="qwen-b") == 2
        assert "kubelet's layout" in s.stderr()
    finally:
        s.kill()
