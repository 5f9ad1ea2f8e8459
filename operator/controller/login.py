"""kopf's connection from the same kubernetes client Configuration the operator uses, so that an explicit
--kubeconfig/--context (e.g. a test cluster's) reaches kopf's watches too."""

import kopf


def register_login(cfg) -> None:
    """cfg: a kubernetes.client.Configuration loaded from a kubeconfig."""

    @kopf.on.login()
    def login(**_):
        token = (cfg.api_key or {}).get("authorization", "") or (cfg.api_key or {}).get("BearerToken", "")
        scheme, _, token = token.partition(" ") if " " in token else ("Bearer", "", token)
        return kopf.ConnectionInfo(
            server=cfg.host, ca_path=cfg.ssl_ca_cert, insecure=not cfg.verify_ssl,
            username=cfg.username or None, password=cfg.password or None,
            scheme=scheme if token else None, token=token or None,
            certificate_path=cfg.cert_file, private_key_path=cfg.key_file)
