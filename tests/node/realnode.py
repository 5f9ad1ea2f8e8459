"""A real node in the test control plane: containerd (its own root, state and socket), a CNI bridge local to this
machine, a kubelet registered as a Node of the test API server (a client cert of the Node authorizer's kind), and
kube-proxy in iptables mode, so that pods get IPs, reach the API server and are reached through Services.

Root only. Everything started here is stopped by PID; what it changed on the host (mounts, network namespaces,
iptables chains, the bridge, the kubepods cgroups, sysctls) is undone at the end, also when start-up fails. One
node per machine at a time: a lock file serialises sessions (the bridge and the iptables chains are per host)."""

import fcntl
import ipaddress
import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from floodway.operator.procs import Proc, free_port, wait_until

NAME = "floodway-node-0"
BRIDGE = "fw-node0"
POD_SUBNET = ipaddress.ip_network(os.environ.get("FLOODWAY_NODE_POD_CIDR", "10.244.0.0/24"))
HOST_IP = str(POD_SUBNET[1])  # the bridge's address: the API server listens here, so pods reach it
CNI_BIN = Path("/usr/lib/cni")
LOCK = Path("/run/lock/floodway-node.lock")
LABEL = {"floodway.io/test-node": "real"}  # selects the real node (the kwok nodes are tainted away)
KWOK_TAINT = "floodway.io/fake-node=true:NoSchedule"
REPLACED = "-replaced"  # the tag import_image keeps an image it replaces under until the import is done
# dockerd builds the images (e2e/images/build.sh); the rest runs the node.
TOOLS = ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip6tables", "ip", "umount", "dockerd")
CNI_PLUGINS = ("bridge", "host-local", "portmap", "loopback")
START_TIMEOUT_S = 180.0
# NodeRestriction: a kubelet may only touch its own Node and its pods.
API_SERVER_ARGS = ("--enable-admission-plugins=NodeRestriction",
                   "--kubelet-preferred-address-types=InternalIP")  # the node's name is in no DNS
SYSCTLS = {"net/ipv4/ip_forward": "1", "net/bridge/bridge-nf-call-iptables": "1"}  # routed pods; Service hairpin
# What the kubelet sets on its own (its kernel defaults) and kube-proxy may set: put back at the end.
RESTORED_SYSCTLS = ("vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
                    "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/conf/all/route_localnet")
CHAIN = re.compile(r"^-N ((?:KUBE|CNI)-\S+)$")


def preflight() -> str | None:
    """Why a real node cannot run on this machine (a skip reason), or None."""
    if os.geteuid() != 0:
        return "the node tier needs root (containerd, a kubelet, a bridge and iptables chains)"
    missing = [t for t in TOOLS if not shutil.which(t)]
    missing += [f"{CNI_BIN}/{p}" for p in CNI_PLUGINS if not (CNI_BIN / p).exists()]
    if missing:
        return (f"the node tier needs {', '.join(missing)} (Debian: containerd runc containernetworking-plugins "
                f"iptables docker.io; `bash e2e/node/install-tools.sh` installs them)")
    if not Path("/proc/sys/net/bridge").exists():
        return "the node tier needs bridge netfilter (net.bridge.bridge-nf-call-iptables) in the kernel"
    return None


def sh(*argv: str, check: bool = True, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr}{done.stdout}")
    return done


def iptables_chains() -> set[tuple[str, str, str]]:
    """(tool, table, chain) of every KUBE-*/CNI-* chain on the host."""
    found = set()
    for tool in ("iptables", "ip6tables"):
        for table in ("filter", "nat", "mangle"):
            rules = sh(tool, "-w", "-t", table, "-S", check=False).stdout.splitlines()
            found |= {(tool, table, m.group(1)) for m in map(CHAIN.match, rules) if m}
    return found


def remove_chains(chains: set[tuple[str, str, str]]) -> None:
    """Deletes the rules that jump to these chains, then the chains themselves."""
    for tool, table in {(t, tb) for t, tb, _ in chains}:
        mine = {c for t, tb, c in chains if (t, tb) == (tool, table)}
        for rule in sh(tool, "-w", "-t", table, "-S", check=False).stdout.splitlines():
            parts = rule.split()
            if parts[0] == "-A" and parts[1] not in mine and "-j" in parts and parts[parts.index("-j") + 1] in mine:
                sh(tool, "-w", "-t", table, "-D", *parts[1:], check=False)
        for op in ("-F", "-X"):
            for chain in mine:
                sh(tool, "-w", "-t", table, op, chain, check=False)


def mounts_under(prefix: Path) -> list[str]:
    """Mount points at or below prefix, deepest first (mountinfo's fifth field, octal escapes decoded)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = re.sub(r"\\(\d{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if point == str(prefix) or point.startswith(f"{prefix}/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def v1_cgroup_roots() -> list[Path]:
    return [Path(line.split()[1]) for line in Path("/proc/self/mounts").read_text().splitlines()
            if line.split()[2] == "cgroup"]


@dataclass
class Host:
    """What the node changes on the machine, recorded so that undo() puts it back."""

    dir: Path
    lock: object | None = None
    sysctls: dict[str, str] = field(default_factory=dict)
    chains_before: set = field(default_factory=set)
    kubepods_before: set = field(default_factory=set)

    def prepare(self) -> None:
        LOCK.parent.mkdir(parents=True, exist_ok=True)
        self.lock = open(LOCK, "w")

        def locked() -> bool:
            try:
                fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False

        wait_until(locked, 600.0, f"the node lock {LOCK} (another session runs a test node)", interval_s=1.0)
        self.chains_before = iptables_chains()
        self.kubepods_before = {r for r in v1_cgroup_roots() if (r / "kubepods").exists()}
        if sh("ip", "link", "show", BRIDGE, check=False).returncode == 0:  # left by a session that was killed
            sh("ip", "link", "delete", BRIDGE)
        sh("ip", "link", "add", BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{HOST_IP}/{POD_SUBNET.prefixlen}", "dev", BRIDGE)
        sh("ip", "link", "set", BRIDGE, "up")
        for key in (*SYSCTLS, *RESTORED_SYSCTLS):
            self.sysctls[key] = (Path("/proc/sys") / key).read_text().strip()
        for key, value in SYSCTLS.items():
            (Path("/proc/sys") / key).write_text(value)

    def undo(self) -> None:
        for point in mounts_under(self.dir):
            if sh("umount", point, check=False).returncode != 0:
                sh("umount", "-l", point, check=False)
        remove_chains(iptables_chains() - self.chains_before)
        for root in set(v1_cgroup_roots()) - self.kubepods_before:  # the kubelet's cgroups, deepest first
            tree = [p for p in (root / "kubepods").glob("**/") if p.is_dir()]
            for group in sorted(tree, key=lambda p: len(p.parts), reverse=True):
                try:
                    group.rmdir()
                except OSError:
                    pass  # a cgroup still in use stays (and says so by staying)
        sh("ip", "link", "delete", BRIDGE, check=False)
        for key, value in self.sysctls.items():
            if (Path("/proc/sys") / key).read_text().strip() != value:
                (Path("/proc/sys") / key).write_text(value)
        if self.lock:
            self.lock.close()  # releases the flock


@dataclass
class Node:
    """The running node: its processes and where its sockets and logs are."""

    dir: Path
    procs: dict[str, Proc] = field(default_factory=dict)
    start_s: float = 0.0  # from starting containerd to the Node being Ready

    image_root: Path = Path(os.environ.get("FLOODWAY_NODE_CACHE", Path.home() / ".cache/floodway/node")) / "containerd"

    @property
    def sock(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    def ctr(self, *args: str, timeout_s: float = 600.0, check: bool = True) -> subprocess.CompletedProcess:
        return sh("ctr", "-a", str(self.sock), "-n", "k8s.io", *args, timeout_s=timeout_s, check=check)

    def import_image(self, tar: str, ref: str) -> None:
        """Imports a `docker save` tarball unless ref already holds this very tarball (named by its inputs'
        digest): unpacking a multi-GB image takes minutes, the store persists across sessions.

        The image ref held before is kept under a second name until the import is done. `ctr images import`
        points ref at the new manifest before unpacking it, which leaves the old image's snapshots unreferenced;
        a garbage collection landing between the unpacker finding a shared lower layer and preparing the layer
        above it fails the import with "parent snapshot ... does not exist" (seen once in CI, containerd 1.6)."""
        marker = self.image_root / "floodway-imported" / ref.replace("/", "_").replace(":", "_")
        names = self.ctr("images", "ls", "-q").stdout.split()
        held = next((n for n in names if n == ref or n.endswith(f"/{ref}")), None)
        if held and marker.exists() and marker.read_text() == Path(tar).name:
            return
        if held:
            self.ctr("images", "tag", "--force", held, held + REPLACED)
        self.ctr("images", "import", tar)
        if held:
            self.ctr("images", "rm", "--sync", held + REPLACED)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(Path(tar).name)

    def prune_store(self) -> None:
        """Frees what the persistent store holds for nobody: containers of a node that was killed before its
        kubelet removed them, and images a newer import replaced, which CRI still names by their id. Left
        alone, each rebuilt engine image pins another 5 GB. Runs before this node's kubelet starts."""
        for container in self.ctr("containers", "ls", "-q").stdout.split():
            self.ctr("containers", "rm", container, check=False)
        images = [line.split() for line in self.ctr("images", "ls").stdout.splitlines()[1:]]
        stale = [ref for ref, *_ in images if ref.endswith(REPLACED)]  # an import_image that was killed
        named = {digest for ref, _type, digest, *_ in images if not ref.startswith("sha256:") and ref not in stale}
        stale += [ref for ref, _type, digest, *_ in images if ref.startswith("sha256:") and digest not in named]
        if stale:  # --sync: the collection is over before any import starts (see import_image)
            self.ctr("images", "rm", "--sync", *stale, check=False)

    def launch(self, name: str, argv: list[str]) -> Proc:
        log_path = self.dir / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc = Proc(popen, 0, str(log_path))
        return proc

    def log_tail(self, name: str, chars: int = 3000) -> str:
        return self.procs[name].log_tail(chars) if name in self.procs else ""


def shims(sock: Path) -> list[int]:
    """PIDs of the containerd shims that serve this containerd (their argv names its socket)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(sock).encode() in argv:
            pids.append(int(proc.name))
    return pids


def write_json(path: Path, obj) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))  # JSON is YAML (kubelet and kube-proxy configs)
    return path


def containerd_config(d: Path, root: Path, sandbox_image: str) -> str:
    """root (images, snapshots) persists across sessions; state, socket and sandboxes are this session's."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{root}"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[{cri}]
  sandbox_image = "{sandbox_image}"
  # The kubelet asks for oom_score_adj -998; without CAP_SYS_RESOURCE that fails every sandbox unless clamped.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{d}/state/runc"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{d}/cni"
"""


def cni_config(d: Path) -> dict:
    return {"cniVersion": "1.0.0", "name": "floodway-node", "plugins": [
        {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False, "hairpinMode": True,
         "ipam": {"type": "host-local", "dataDir": str(d / "ipam"), "routes": [{"dst": "0.0.0.0/0"}],
                  "ranges": [[{"subnet": str(POD_SUBNET), "gateway": HOST_IP}]]}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]}


def kubelet_config(d: Path, ca: Path, sock: Path, port: int, healthz_port: int) -> dict:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": HOST_IP, "port": port, "readOnlyPort": 0, "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port, "containerRuntimeEndpoint": f"unix://{sock}",
        # The machine has no systemd, swap may be on, and its cgroups are v1 (hybrid).
        "cgroupDriver": "cgroupfs", "failSwapOn": False, "failCgroupV1": False,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca)}},
        "authorization": {"mode": "Webhook"},
        "clusterDomain": "cluster.local", "resolvConf": "/etc/resolv.conf",
        # cAdvisor finds no filesystem stats for the root disk here, so disk-based eviction cannot work; a
        # shared test machine is never evicted for memory either.
        "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%",
                         "nodefs.inodesFree": "1%"},
        "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
        "podLogsDir": str(d / "pod-logs"), "volumePluginDir": str(d / "volume-plugins"),
        "maxPods": 60, "serializeImagePulls": False, "shutdownGracePeriod": "0s",
    }


def kube_proxy_config(kubeconfig: Path) -> dict:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)}, "mode": "iptables", "hostnameOverride": NAME,
        "clusterCIDR": str(POD_SUBNET), "bindAddress": HOST_IP,
        "healthzBindAddress": f"127.0.0.1:{free_port()}", "metricsBindAddress": f"127.0.0.1:{free_port()}",
        "nodePortAddresses": [f"{HOST_IP}/32"],  # never on the machine's own network
        # Setting conntrack limits needs CAP_SYS_RESOURCE, which this machine withholds even from root: keep
        # the kernel's values.
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        "iptables": {"localhostNodePorts": False},
    }


def start(cluster, cp, d: Path, pause_image: str, pause_tar: str) -> Node:
    """containerd, then the kubelet (waited for until its Node is Ready) and kube-proxy (until healthy). cluster is
    the control plane (tests/cluster/conftest.py's Cluster, started on HOST_IP), cp that module."""
    node = Node(d)
    started = time.monotonic()
    c = d / "containerd"
    (c / "cni").mkdir(parents=True)
    (c / "config.toml").write_text(containerd_config(c, node.image_root, pause_image))
    write_json(c / "cni" / "10-floodway.conflist", cni_config(c))
    containerd = node.launch("containerd", ["containerd", "--config", str(c / "config.toml"), "--log-level", "warn"])

    def containerd_up() -> bool:
        if not containerd.alive():
            raise RuntimeError(f"containerd exited:\n{containerd.log_tail()}")
        return node.sock.exists() and sh("ctr", "-a", str(node.sock), "version", check=False).returncode == 0

    wait_until(containerd_up, START_TIMEOUT_S, "containerd", interval_s=0.2)
    node.prune_store()
    node.import_image(pause_tar, pause_image)

    # The Node authorizer and NodeRestriction know a kubelet by this subject.
    pki = cluster.dir
    cp.issue_cert(pki, "kubelet", f"/O=system:nodes/CN=system:node:{NAME}", "extendedKeyUsage=clientAuth")
    cp.issue_cert(pki, "kube-proxy", "/CN=system:kube-proxy", "extendedKeyUsage=clientAuth")  # system:node-proxier
    kubeconfigs = {who: cp.write_kubeconfig(d / f"{who}.kubeconfig", cluster.server, pki / "ca.crt", {
        "client-certificate": str(pki / f"{who}.crt"), "client-key": str(pki / f"{who}.key")})
        for who in ("kubelet", "kube-proxy")}
    healthz = free_port()
    config = write_json(d / "kubelet.json", kubelet_config(d, pki / "ca.crt", node.sock, free_port(), healthz))
    labels = ",".join(f"{k}={v}" for k, v in LABEL.items())
    kubelet = node.launch("kubelet", [
        str(cluster.bin / "kubelet"), f"--config={config}", f"--kubeconfig={kubeconfigs['kubelet']}",
        f"--root-dir={d / 'kubelet'}", f"--cert-dir={d / 'kubelet-pki'}", f"--hostname-override={NAME}",
        f"--node-ip={HOST_IP}", f"--node-labels={labels}", "--v=1"])

    def ready() -> bool:
        if not kubelet.alive():
            raise RuntimeError(f"the kubelet exited:\n{kubelet.log_tail()}")
        got = cluster.kubectl("get", "node", NAME, "-o", "json", check=False)
        if got.returncode != 0:
            return False
        conditions = json.loads(got.stdout)["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    try:
        wait_until(ready, START_TIMEOUT_S, f"Node {NAME} Ready", interval_s=0.5)
    except TimeoutError as e:
        raise RuntimeError(f"{e}\nkubelet:\n{kubelet.log_tail()}\ncontainerd:\n{containerd.log_tail()}") from None
    node.start_s = time.monotonic() - started

    proxy_config = kube_proxy_config(kubeconfigs["kube-proxy"])
    proxy = node.launch("kube-proxy", [str(cluster.bin / "kube-proxy"), "--v=1",
                                       f"--config={write_json(d / 'kube-proxy.json', proxy_config)}"])
    with httpx.Client() as client:
        cp.wait_healthy(proxy, "kube-proxy", f"http://{proxy_config['healthzBindAddress']}/healthz", client)
    return node


def stop(node: Node, cluster) -> None:
    """Pods on the node deleted through the API (the kubelet tears their sandboxes and networks down), then
    kube-proxy (and its chains), the kubelet and containerd stopped; any container left is killed."""
    for name in ("kube-controller-manager", "kube-scheduler"):  # nothing may recreate the pods
        if name in cluster.procs:
            cluster.procs[name].stop(grace_s=10.0)
    if "kubelet" in node.procs and node.procs["kubelet"].alive():
        selector = f"spec.nodeName={NAME}"
        cluster.kubectl("delete", "pods", "--all", "-A", f"--field-selector={selector}", "--grace-period=5",
                        "--wait=false", check=False)

        def pods_gone() -> bool:
            got = cluster.kubectl("get", "pods", "-A", f"--field-selector={selector}", "-o", "name", check=False)
            return got.returncode == 0 and not got.stdout.strip()

        try:
            wait_until(pods_gone, 90.0, f"the pods on {NAME} deleted", interval_s=0.5)
        except TimeoutError:
            pass  # the containers are killed below
    if "kube-proxy" in node.procs:
        node.procs["kube-proxy"].stop(grace_s=10.0)
        sh(str(cluster.bin / "kube-proxy"), "--cleanup", check=False)
    if "kubelet" in node.procs:
        node.procs["kubelet"].stop(grace_s=10.0)
    if "containerd" in node.procs and node.procs["containerd"].alive():
        for task in node.ctr("tasks", "ls", "-q").stdout.split():
            sh("ctr", "-a", str(node.sock), "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", task, check=False)
            sh("ctr", "-a", str(node.sock), "-n", "k8s.io", "tasks", "delete", "-f", task, check=False)
        node.procs["containerd"].stop(grace_s=10.0)
    for pid in shims(node.sock):  # a shim outlives containerd by design
        os.kill(pid, 9)
