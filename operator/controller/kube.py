"""A small Kubernetes REST helper on the official client's transport: server-side apply, get, list and
patch by plain dicts and computed paths, so reconcile needs no API discovery and no typed models."""

import json
import os
from pathlib import Path
from urllib.parse import quote

from floodway.operator.spec import PLURAL

PLURALS = {"Deployment": "deployments", "Service": "services", "ConfigMap": "configmaps",
           "ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
           "PodDisruptionBudget": "poddisruptionbudgets", "Pod": "pods", "Lease": "leases",
           "InferenceService": PLURAL, "Event": "events", "NetworkPolicy": "networkpolicies",
           "PersistentVolumeClaim": "persistentvolumeclaims"}
FIELD_MANAGER = "floodway-operator"


class KubeError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None,
                subresource: str | None = None) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{base}/namespaces/{quote(namespace)}/{PLURALS[kind]}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path


SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def own_namespace(path: str = SA_NAMESPACE_FILE) -> str | None:
    """The namespace this process runs in, in a pod (POD_NAMESPACE, else its ServiceAccount's); None outside."""
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def load_api_client(kubeconfig: str | None = None, context: str | None = None):
    """In-cluster config when running in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if kubeconfig or context:
            raise config.ConfigException("explicit kubeconfig")
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    return client.ApiClient(cfg)


class Kube:
    def __init__(self, api_client, field_manager: str = FIELD_MANAGER):
        self.api = api_client
        self.field_manager = field_manager

    def request(self, method: str, path: str, query: list[tuple[str, str]] | None = None, body=None,
                content_type: str = "application/json", timeout_s: float = 30.0) -> dict | None:
        from kubernetes.client.exceptions import ApiException

        req = self.api.param_serialize(method, path, query_params=query or [],
                                       header_params={"Accept": "application/json", "Content-Type": content_type},
                                       body=body, auth_settings=["BearerToken"])
        try:
            resp = self.api.call_api(*req, _request_timeout=timeout_s)
            data = resp.read()
            status = resp.status
        except ApiException as e:
            data, status = e.body, e.status
        if not 200 <= status <= 299:
            try:
                message = json.loads(data).get("message", data)
            except (TypeError, ValueError):
                message = data
            raise KubeError(status, str(message))
        return json.loads(data) if data else None

    def apply(self, obj: dict) -> dict:
        """Server-side apply: idempotent, and only the fields we set are ours."""
        meta = obj["metadata"]
        path = object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        return self.request("PATCH", path, [("fieldManager", self.field_manager), ("force", "true")], obj,
                            "application/apply-patch+yaml")

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict | None:
        try:
            return self.request("GET", object_path(api_version, kind, namespace, name))
        except KubeError as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[dict]:
        out = self.request("GET", object_path(api_version, kind, namespace), [("labelSelector", label_selector)])
        return out.get("items", []) if out else []

    def create(self, obj: dict) -> dict:
        meta = obj["metadata"]
        return self.request("POST", object_path(obj["apiVersion"], obj["kind"], meta["namespace"]), body=obj)

    def replace(self, obj: dict) -> dict:
        meta = obj["metadata"]
        return self.request("PUT", object_path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]),
                            body=obj)
