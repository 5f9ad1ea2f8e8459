"""Pod and container security settings: non-root, no privilege escalation, no capabilities, read-only root."""

UID = 1000

# OnRootMismatch: a large cache volume is not walked and re-owned at every pod start.
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
                "fsGroupChangePolicy": "OnRootMismatch", "seccompProfile": {"type": "RuntimeDefault"}}

CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}

# Every path a container writes is a volume of its pod (cache, /tmp, /dev/shm, config), so the image stays as built.
LOCKED_CONTAINER = {**CONTAINER_SECURITY, "readOnlyRootFilesystem": True}
