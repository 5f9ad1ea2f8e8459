"""The node tier's fixtures: the cluster tier's control plane, started on the address of a bridge that pods reach,
with a real node (realnode.py) next to its kwok nodes, and Floodway's own images imported into its containerd.
Root and the Debian packages of e2e/node/install-tools.sh are needed; elsewhere the tier skips and says why."""

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def _load(name: str, path: Path):
    """A helper module by path: pytest's importlib mode puts no test folder on sys.path."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


cp = _load("floodway_tests_control_plane", REPO / "tests" / "cluster" / "conftest.py")
realnode = _load("floodway_tests_realnode", HERE / "realnode.py")
chart = _load("floodway_tests_chart", HERE / "chart.py")


def script_outputs(script: Path, timeout_s: float = 3600.0) -> dict[str, str]:
    """Runs a build script and returns its trailing KEY=value lines. Interrupted (the test's timeout, Ctrl-C), its
    process group gets SIGTERM, so the script's trap stops what it started (e2e/images/build.sh: its own dockerd,
    which a SIGKILL of the script alone left running)."""
    proc = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except BaseException:
        for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=wait_s)
                break
        raise
    if proc.returncode != 0:
        pytest.fail(f"{script.relative_to(REPO)} failed:\n{err[-4000:]}{out[-2000:]}", pytrace=False)
    return dict(line.split("=", 1) for line in out.splitlines() if line.startswith("FLOODWAY_"))


@dataclass
class NodeCluster:
    cluster: object  # tests/cluster/conftest.py's Cluster: kubectl, helm, get, wait_until
    node: object  # realnode.Node
    name: str = realnode.NAME
    pod_subnet: object = realnode.POD_SUBNET
    host_ip: str = realnode.HOST_IP  # the machine's address on the pods' bridge


@pytest.fixture(scope="session")
def node_cluster(tmp_path_factory) -> NodeCluster:
    reason = realnode.preflight()
    if reason:
        pytest.skip(reason)
    bin_dir = cp.binaries()
    pause = script_outputs(REPO / "e2e" / "node" / "build.sh")
    d = tmp_path_factory.mktemp("node-cluster")
    cluster = cp.Cluster(bin_dir, d, d / "kubeconfig", "")
    host = realnode.Host(d)
    node = None
    try:
        host.prepare()
        # The API server reaches the kubelet (logs, exec) with the admin client cert, which the kubelet trusts.
        cp.start_control_plane(cluster, realnode.HOST_IP, (
            *realnode.API_SERVER_ARGS, f"--kubelet-client-certificate={d / 'admin.crt'}",
            f"--kubelet-client-key={d / 'admin.key'}"))
        for name in cp.GPU_NODES:  # workloads go to the real node; the kwok nodes stay for GPU-shaped tests
            cluster.kubectl("taint", "node", name, realnode.KWOK_TAINT)
        node = realnode.start(cluster, cp, d / "node", pause["FLOODWAY_PAUSE_IMAGE"], pause["FLOODWAY_PAUSE_TAR"])
        print(f"\nnode tier: {realnode.NAME} Ready {node.start_s:.1f} s after containerd started")
        yield NodeCluster(cluster, node)
    finally:
        try:
            if node is not None:
                realnode.stop(node, cluster)
            for proc in reversed(list(cluster.procs.values())):
                proc.stop(grace_s=10.0)
        finally:
            host.undo()
            shutil.rmtree(d / "etcd", ignore_errors=True)


@pytest.fixture(scope="session")
def floodway_images(node_cluster: NodeCluster) -> dict[str, str]:
    """Our engine (CPU) and operator images, built by e2e/images/build.sh (cached by their inputs) and imported
    into the node's containerd: {"engine": ref, "operator": ref}. With that script's four output variables set in
    the environment (images built elsewhere), those are used and nothing is built."""
    names = [f"FLOODWAY_IMAGE_{k}{t}" for k in ("ENGINE", "OPERATOR") for t in ("", "_TAR")]
    built = ({n: os.environ[n] for n in names} if all(n in os.environ for n in names)
             else script_outputs(REPO / "e2e" / "images" / "build.sh"))
    refs = {}
    for kind in ("engine", "operator"):
        refs[kind] = built[f"FLOODWAY_IMAGE_{kind.upper()}"]
        started = time.monotonic()
        node_cluster.node.import_image(built[f"FLOODWAY_IMAGE_{kind.upper()}_TAR"], refs[kind])
        print(f"\nnode tier: {refs[kind]} in the node's containerd after {time.monotonic() - started:.1f} s")
    return refs



@pytest.fixture(scope="session")
def model_folder() -> Path:
    """SmolLM2 as the engine converts it on first use, in the host's Floodway cache (converted now if need be)."""
    from floodway.engine.models import smollm2
    from floodway.engine.models.builtin import resolve_model

    return Path(resolve_model(smollm2.NAME))


@pytest.fixture(scope="session")
def floodway_chart(node_cluster: NodeCluster, floodway_images, model_folder):
    """The chart installed in chart.NS with our images and the model on its claim (chart.py): the cluster."""
    chart.install(node_cluster.cluster, REPO, floodway_images, model_folder, node_cluster.name)
    return node_cluster.cluster
