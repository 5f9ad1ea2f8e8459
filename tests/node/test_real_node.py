"""The real node itself: a pod from an image imported into its containerd (no registry) starts, turns Ready through
a real HTTP readiness probe, is reached from the host through a Service (kube-proxy's iptables rules), and a pod
reaches the API server through the `kubernetes` Service with its ServiceAccount token, as the operator will."""

import ipaddress
import json
import time

import httpx

NS = "node-smoke"


def apply(cluster, *objs: dict) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


def test_pod_ready_and_reached_through_a_service(node_cluster, floodway_images):
    c = node_cluster.cluster
    c.kubectl("create", "namespace", NS)
    probe = {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 1}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": NS, "labels": {"app": "web"}},
           "spec": {"containers": [{
               "name": "web", "image": floodway_images["operator"], "imagePullPolicy": "Never",
               "command": ["python", "-P", "-m", "http.server", "8080"],
               "ports": [{"name": "http", "containerPort": 8080}], "readinessProbe": probe}]}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": NS},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}}
    created = time.monotonic()
    apply(c, pod, service)

    def ready() -> dict | None:
        p = c.get("-n", NS, "pod", "web")
        conditions = p["status"].get("conditions", [])
        return p if any(x["type"] == "Ready" and x["status"] == "True" for x in conditions) else None

    p = c.wait_until("the pod Ready", ready, timeout_s=120)
    print(f"\nnode tier: pod created to Ready in {time.monotonic() - created:.1f} s")
    assert p["spec"]["nodeName"] == node_cluster.name
    assert ipaddress.ip_address(p["status"]["podIP"]) in node_cluster.pod_subnet

    cluster_ip = c.get("-n", NS, "service", "web")["spec"]["clusterIP"]

    def answers() -> httpx.Response | None:
        try:
            r = httpx.get(f"http://{cluster_ip}/", timeout=2.0)
        except httpx.HTTPError:
            return None  # until kube-proxy has written the Service's rules
        # A cluster IP freed by an earlier test's Service can still lead to that one's pods until kube-proxy syncs.
        return r if r.status_code == 200 and "Directory listing" in r.text else None

    c.wait_until("the Service answering from the host with this pod's page", answers, timeout_s=60)


def test_pod_reaches_the_api_server(node_cluster, floodway_images):
    c = node_cluster.cluster
    c.kubectl("create", "namespace", f"{NS}-api")
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    # In-cluster config as every client library does it: the Service's IP from the environment, the CA and the
    # token from the projected volume. The pod succeeds only if TLS (the IP in the cert's SANs) and RBAC pass.
    script = (
        "import os, ssl, urllib.request\n"
        f"ctx = ssl.create_default_context(cafile='{sa}/ca.crt')\n"
        f"token = open('{sa}/token').read()\n"
        "url = f\"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}\"\n"
        "req = urllib.request.Request(url + '/api/v1/namespaces/default', "
        "headers={'Authorization': 'Bearer ' + token})\n"
        "try:\n"
        "    urllib.request.urlopen(req, context=ctx)\n"
        "except urllib.error.HTTPError as e:\n"
        "    assert e.code == 403, e.code  # authenticated as the ServiceAccount, which may not read namespaces\n"
        "    print('reached the API server as', os.environ.get('HOSTNAME'))\n")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client", "namespace": f"{NS}-api"},
           "spec": {"restartPolicy": "Never", "containers": [{
               "name": "client", "image": floodway_images["operator"], "imagePullPolicy": "Never",
               "command": ["python", "-P", "-c", script]}]}}
    apply(c, pod)

    def finished() -> str | None:
        phase = c.get("-n", f"{NS}-api", "pod", "client")["status"].get("phase")
        return phase if phase in ("Succeeded", "Failed") else None

    phase = c.wait_until("the client pod finished", finished, timeout_s=120)
    logs = c.kubectl("-n", f"{NS}-api", "logs", "client", check=False)
    assert phase == "Succeeded", logs.stdout + logs.stderr
    assert "reached the API server" in logs.stdout
