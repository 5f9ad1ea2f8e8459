"""A real Kubernetes control plane for the cluster tests, started once per session on loopback ports: etcd,
kube-apiserver (generated certs, RBAC, a service account signing key), kube-controller-manager, kube-scheduler
and kwok (a fake kubelet) with nodes that have `nvidia.com/gpu` capacity. The binaries come from
e2e/cluster/build.sh (`make test` runs it first). Everything started here is stopped by PID at the end, also
when start-up or a test fails."""

import json
import os
import shutil
import ssl
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from floodway.operator.procs import Proc, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "e2e" / "cluster" / "build.sh"
GPU_NODES = {"gpu-node-0": 4, "gpu-node-1": 4}  # name -> nvidia.com/gpu capacity
START_TIMEOUT_S = 120.0
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"  # the first address of SERVICE_CIDR: the `kubernetes` Service


def binaries() -> Path:
    """The folder build.sh filled (FLOODWAY_CLUSTER_BIN overrides); a clear failure when it is not built."""
    if os.environ.get("FLOODWAY_CLUSTER_BIN"):
        return Path(os.environ["FLOODWAY_CLUSTER_BIN"])
    where = subprocess.run(["bash", str(BUILD_SCRIPT), "--where"], capture_output=True, text=True)
    if where.returncode != 0:
        pytest.fail(f"control-plane binaries are not built: run `bash {BUILD_SCRIPT.relative_to(REPO)}` first "
                    f"(`make test` does)\n{where.stderr}", pytrace=False)
    return Path(where.stdout.strip().splitlines()[-1].split("=", 1)[1])


def make_pki(d: Path, host: str = "127.0.0.1") -> None:
    """A CA, the API server's serving cert (for `host` and the `kubernetes` Service's IP), an admin client cert
    (system:masters) and a service account key."""
    (d / "openssl.cnf").write_text("[req]\ndistinguished_name = dn\n[dn]\n")  # no defaults from the system file
    issue_cert(d, "ca", "/CN=floodway-test-ca", "basicConstraints=critical,CA:TRUE",
               "keyUsage=critical,keyCertSign,cRLSign", ca=True)
    issue_cert(d, "apiserver", "/CN=kube-apiserver", "extendedKeyUsage=serverAuth",
               f"subjectAltName=IP:{host},IP:{KUBERNETES_SERVICE_IP},DNS:localhost,DNS:kubernetes,"
               "DNS:kubernetes.default.svc")
    issue_cert(d, "admin", "/O=system:masters/CN=floodway-test-admin", "extendedKeyUsage=clientAuth")
    openssl(d, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "sa.key")
    openssl(d, "pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")


def issue_cert(d: Path, name: str, subject: str, *ext: str, ca: bool = False) -> None:
    """{name}.key and {name}.crt in d, signed by d's ca.crt (self-signed when ca); ext are -addext lines."""
    signer = [] if ca else ["-CA", "ca.crt", "-CAkey", "ca.key"]
    args = ["req", "-config", "openssl.cnf", "-x509", *signer, "-newkey", "ec", "-pkeyopt",
            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-keyout", f"{name}.key", "-out", f"{name}.crt",
            "-subj", subject]
    for e in ext:
        args += ["-addext", e]
    openssl(d, *args)


def openssl(cwd: Path, *args: str) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed:\n{done.stderr}")


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict) -> Path:
    cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "floodway-test",
           "clusters": [{"name": "floodway-test", "cluster": {"server": server, "certificate-authority": str(ca)}}],
           "users": [{"name": "user", "user": user}],
           "contexts": [{"name": "floodway-test", "context": {"cluster": "floodway-test", "user": "user"}}]}
    path.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
    return path


@dataclass
class Cluster:
    """What the tests get: where the binaries and the kubeconfig are, and thin wrappers over kubectl/helm."""

    bin: Path
    dir: Path
    kubeconfig: Path
    server: str
    procs: dict[str, Proc] = field(default_factory=dict)

    def env(self, **extra: str) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PATH": f"{self.bin}:{os.environ['PATH']}",
                "HELM_CACHE_HOME": str(self.dir / "helm"), "HELM_CONFIG_HOME": str(self.dir / "helm"),
                "HELM_DATA_HOME": str(self.dir / "helm"), **extra}

    def run(self, tool: str, *args: str, input: str | None = None, check: bool = True,
            timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        done = subprocess.run([str(self.bin / tool), *args], input=input, capture_output=True, text=True,
                              env=self.env(), timeout=timeout_s)
        if check and done.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
        return done

    def kubectl(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run("kubectl", *args, **kw)

    def helm(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run("helm", *args, **kw)

    def get(self, *args: str) -> dict:
        """`kubectl get ... -o json` as a dict."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def wait_until(self, what: str, check, timeout_s: float = 60.0, interval_s: float = 0.25):
        """Polls check() until it returns something truthy (returned); fails with `what` at the deadline."""
        return wait_until(check, timeout_s, what, interval_s)

    def wait_established(self, crd: str, timeout_s: float = 60.0) -> None:
        """Polls until the CRD is Established. `kubectl wait --for=condition=Established` fails at once, instead of
        waiting, when it reads the CRD before the API server wrote any condition (".status.conditions accessor
        error: <nil>"), as it did on a cold control plane in CI."""
        def established() -> bool:
            conditions = self.get("crd", crd).get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
        self.wait_until(f"CRD {crd} Established", established, timeout_s)

    def log_tail(self, name: str, chars: int = 3000) -> str:
        return self.procs[name].log_tail(chars)

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig that acts as the ServiceAccount (a TokenRequest token), as its pod would."""
        token = self.kubectl("-n", namespace, "create", "token", name, "--duration=2h").stdout.strip()
        return write_kubeconfig(self.dir / f"{namespace}-{name}.kubeconfig", self.server, self.dir / "ca.crt",
                                {"token": token})


def launch(cluster: Cluster, name: str, argv: list[str]) -> Proc:
    log_path = cluster.dir / f"{name}.log"
    with open(log_path, "ab") as log:
        popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc = Proc(popen, 0, str(log_path))
    cluster.procs[name] = proc
    return proc


def wait_healthy(proc: Proc, name: str, url: str, client: httpx.Client) -> None:
    def healthy() -> bool:
        if not proc.alive():
            raise RuntimeError(f"{name} exited with {proc.popen.returncode}:\n{proc.log_tail()}")
        try:
            return client.get(url, timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, START_TIMEOUT_S, f"{name} healthy at {url}", interval_s=0.2)
    except TimeoutError:
        raise RuntimeError(f"{name} not healthy at {url} within {START_TIMEOUT_S}s:\n{proc.log_tail()}") from None


def start_control_plane(cluster: Cluster, host: str = "127.0.0.1", apiserver_args: tuple[str, ...] = ()) -> None:
    """Listens on `host`; another address than loopback (one that pods reach) also gets the `kubernetes`
    Service's endpoints."""
    b, d = cluster.bin, cluster.dir
    make_pki(d, host)
    ports = {n: free_port() for n in ("etcd", "peer", "apiserver", "cm", "scheduler", "kwok")}
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    cluster.server = f"https://{host}:{ports['apiserver']}"
    write_kubeconfig(cluster.kubeconfig, cluster.server, d / "ca.crt",
                     {"client-certificate": str(d / "admin.crt"), "client-key": str(d / "admin.key")})
    kc = f"--kubeconfig={cluster.kubeconfig}"
    plain, insecure = httpx.Client(), httpx.Client(verify=False)  # the components' self-signed health ports
    tls = ssl.create_default_context(cafile=str(d / "ca.crt"))
    tls.load_cert_chain(str(d / "admin.crt"), str(d / "admin.key"))
    admin = httpx.Client(verify=tls, base_url=cluster.server)

    peer = f"http://127.0.0.1:{ports['peer']}"
    wait_healthy(launch(cluster, "etcd", [
        str(b / "etcd"), "--name=test", f"--data-dir={d / 'etcd'}", f"--listen-client-urls={etcd_url}",
        f"--advertise-client-urls={etcd_url}", f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}", f"--initial-cluster=test={peer}",
        "--unsafe-no-fsync", "--log-level=warn"]),  # a throwaway store: durability buys nothing here
        "etcd", etcd_url + "/health", plain)
    wait_healthy(launch(cluster, "kube-apiserver", [
        str(b / "kube-apiserver"), f"--etcd-servers={etcd_url}", f"--bind-address={host}",
        f"--secure-port={ports['apiserver']}", f"--advertise-address={host}", f"--cert-dir={d / 'certs'}",
        f"--tls-cert-file={d / 'apiserver.crt'}", f"--tls-private-key-file={d / 'apiserver.key'}",
        f"--client-ca-file={d / 'ca.crt'}", f"--service-account-key-file={d / 'sa.pub'}",
        f"--service-account-signing-key-file={d / 'sa.key'}",
        "--service-account-issuer=https://kubernetes.default.svc", f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC", "--allow-privileged=true", "--profiling=false",
        f"--endpoint-reconciler-type={'none' if host == '127.0.0.1' else 'lease'}", *apiserver_args]),
        "kube-apiserver", "/readyz", admin)
    wait_healthy(launch(cluster, "kube-controller-manager", [
        str(b / "kube-controller-manager"), kc, "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={ports['cm']}", f"--service-account-private-key-file={d / 'sa.key'}",
        f"--root-ca-file={d / 'ca.crt'}", "--profiling=false"]),
        "kube-controller-manager", f"https://127.0.0.1:{ports['cm']}/healthz", insecure)
    wait_healthy(launch(cluster, "kube-scheduler", [
        str(b / "kube-scheduler"), kc, "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={ports['scheduler']}", "--profiling=false"]),
        "kube-scheduler", f"https://127.0.0.1:{ports['scheduler']}/healthz", insecure)
    # Pod IPs come from a loopback range, so that a test can serve a (fake) engine pod's /metrics on its IP.
    wait_healthy(launch(cluster, "kwok", [
        str(b / "kwok"), kc, f"--config={b / 'kwok.yaml'}", "--node-lease-duration-seconds=40",
        "--manage-all-nodes=false",
        "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
        "--cidr=127.1.0.0/16", "--node-ip=127.0.0.1", f"--server-address=127.0.0.1:{ports['kwok']}"]),
        "kwok", f"http://127.0.0.1:{ports['kwok']}/healthz", plain)
    add_gpu_nodes(cluster)
    # Pods need the namespace's default ServiceAccount, which the controller manager creates.
    cluster.wait_until("the default ServiceAccount", lambda: admin.get(
        "/api/v1/namespaces/default/serviceaccounts/default").status_code == 200, START_TIMEOUT_S)
    for client in (plain, insecure, admin):
        client.close()


def add_gpu_nodes(cluster: Cluster) -> None:
    """Fake nodes that kwok keeps Ready; nodes may set their status on create, as a kubelet does."""
    for name, gpus in GPU_NODES.items():
        capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                             "labels": {"type": "kwok", "kubernetes.io/hostname": name,
                                        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                "status": {"capacity": capacity, "allocatable": capacity}}
        cluster.kubectl("create", "-f", "-", input=json.dumps(node))

    def all_ready() -> bool:
        nodes = cluster.get("nodes")["items"]
        ready = [n for n in nodes if any(c["type"] == "Ready" and c["status"] == "True"
                                         for c in n["status"].get("conditions", []))]
        return len(ready) == len(GPU_NODES)

    cluster.wait_until("kwok nodes Ready", all_ready, START_TIMEOUT_S)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Cluster:
    bin_dir = binaries()
    d = tmp_path_factory.mktemp("control-plane")
    c = Cluster(bin_dir, d, d / "kubeconfig", "")
    try:
        start_control_plane(c)
        yield c
    finally:
        for proc in reversed(list(c.procs.values())):  # kwok first, etcd last
            proc.stop(grace_s=10.0)
        shutil.rmtree(d / "etcd", ignore_errors=True)


@pytest.fixture(scope="session")
def floodway_crd(cluster: Cluster) -> str:
    """The checked-in InferenceService CRD (crds/), applied and Established; returns its name."""
    crd = REPO / "crds" / "inferenceservices.serving.floodway.io.yaml"
    cluster.kubectl("apply", "--server-side", "-f", str(crd))
    cluster.wait_established("inferenceservices.serving.floodway.io")
    return "inferenceservices.serving.floodway.io"


# The namespaces the test release's operator manages (a Role in each): test_operator's and test_leader's.
WATCHED_NAMESPACES = ("serving", "leader")


@pytest.fixture(scope="session")
def floodway_release(cluster: Cluster) -> str:
    """charts/floodway installed with helm (release `floodway` in floodway-system), waited for, managing
    WATCHED_NAMESPACES (created first: the chart puts a Role in each)."""
    for ns in WATCHED_NAMESPACES:
        cluster.kubectl("create", "namespace", ns)
    cluster.helm("install", "floodway", str(REPO / "charts" / "floodway"), "--namespace", "floodway-system",
                 "--create-namespace", "--set", f"watchNamespaces={{{','.join(WATCHED_NAMESPACES)}}}", "--wait",
                 "--timeout", "120s", timeout_s=180)
    return "floodway"
