"""`floodway operator`: run the kopf operator against the current kubeconfig or in-cluster config."""

import asyncio
import logging
import os
import re
import socket
import sys
import threading

import typer

NAMESPACE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def quiet_timer(record: logging.LogRecord) -> bool:
    """The autoscaling timer wakes every second per service; its routine success is not worth a log line."""
    return not (record.levelno <= logging.INFO and str(record.msg).startswith("Timer 'autoscale' succeeded"))


def watch_scope(namespaces: list[str] | None, all_namespaces: bool) -> list[str]:
    """The namespaces to manage; [] means all. The choice is explicit, because the RBAC that goes with it differs:
    a Role per named namespace, or a ClusterRole. Names only: kopf's glob patterns would need namespace listing
    (cluster-wide) and could match namespaces whose Role the chart never rendered."""
    namespaces = list(dict.fromkeys(namespaces or []))
    if all_namespaces and namespaces:
        raise ValueError("--all-namespaces and --namespace exclude each other")
    if not all_namespaces and not namespaces:
        raise ValueError("name the namespaces to manage with --namespace (repeat it), or say --all-namespaces")
    bad = [n for n in namespaces if not NAMESPACE_NAME.match(n)]
    if bad:
        raise ValueError(f"--namespace takes namespace names, not patterns: {', '.join(bad)}")
    return namespaces


def register(app: typer.Typer) -> None:
    @app.command()
    def operator(
        namespace: list[str] = typer.Option(None, "--namespace", "-n",
                                            help="Manage InferenceServices in this namespace (repeat)."),
        all_namespaces: bool = typer.Option(False, "--all-namespaces", "-A",
                                            help="Manage InferenceServices in every namespace (needs a "
                                            "ClusterRole; the chart's clusterWide)."),
        kubeconfig: str = typer.Option(None, help="Kubeconfig file (default: in-cluster, then $KUBECONFIG)."),
        context: str = typer.Option(None, help="Kubeconfig context."),
        health_port: int = typer.Option(0, help="Port of /healthz for a liveness probe (0: none; chart: 8080)."),
        log_level: str = typer.Option("info", help="debug, info, warning or error."),
        lease_namespace: str = typer.Option(None, help="Namespace of the leader-election Lease (unset: no "
                                            "election; run one replica only)."),
        lease_name: str = typer.Option("floodway-operator", help="Name of the leader-election Lease."),
        lease_duration: float = typer.Option(15.0, min=5, help="Seconds a leader's Lease lasts unrenewed."),
        identity: str = typer.Option(None, help="This replica's name in the Lease (default: $POD_NAME)."),
        gateway_url: str = typer.Option("http://{pod_ip}:{pod_port}",
                                        help="Template of the URL of each ready gateway pod for scraping "
                                        "({pod_ip}, {pod_port}, {name}, {namespace}, {port}: the Service's); '' "
                                        "skips the gateway, e.g. for an operator outside the cluster."),
    ) -> None:
        """Run the InferenceService operator (kopf): reconcile, autoscale, status and events."""
        try:
            namespaces = watch_scope(namespace, all_namespaces)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
        import kopf
        from floodway.operator.controller import handlers  # noqa: F401 (registers the handlers)
        from floodway.operator.controller.health import serve_health
        from floodway.operator.controller.kube import Kube, load_api_client
        from floodway.operator.controller.lease import LeaderElector
        from floodway.operator.render import Images

        logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("kopf.objects").addFilter(quiet_timer)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per scrape otherwise
        api = load_api_client(kubeconfig, context)
        if not api.configuration.verify_ssl:  # the kubeconfig asked for it; say so once, not per request
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
            logging.warning("TLS verification of the API server is off (insecure-skip-tls-verify)")
        if kubeconfig or context:
            from floodway.operator.controller.login import register_login

            register_login(api.configuration)
        kube = Kube(api)
        if health_port:
            serve_health(health_port)
        stop = threading.Event()  # ends the lease renewal
        lost = threading.Event()
        elector = None
        if lease_namespace:
            me = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
            elector = LeaderElector(kube, lease_namespace, lease_name, me, lease_duration)
            if not elector.wait_until_leader(stop):
                return
        memo = kopf.Memo(kube=kube, images=Images.from_env(), gateway_url_template=gateway_url)

        async def run() -> None:
            # kopf stops on SIGTERM/SIGINT by itself; a lost Lease stops it through this flag. (A threading.Event
            # as kopf's stop flag would park an executor thread that blocks the loop's shutdown.)
            loop = asyncio.get_running_loop()
            stop_flag = asyncio.Event()
            if elector is not None:
                def on_lost():
                    lost.set()
                    loop.call_soon_threadsafe(stop_flag.set)

                threading.Thread(target=elector.keep_renewing, args=(stop, on_lost), daemon=True).start()
            # Namespaced, kopf takes the named namespaces as they are and reads the served resources once from
            # API discovery: no cluster-wide namespace or CRD watch, so the Roles are all the RBAC it needs.
            settings = kopf.OperatorSettings()
            settings.scanning.disabled = bool(namespaces)
            await kopf.operator(clusterwide=not namespaces, namespaces=namespaces, standalone=True, memo=memo,
                                settings=settings, stop_flag=stop_flag)

        try:
            asyncio.run(run())
        finally:
            stop.set()
            if elector is not None and not lost.is_set():
                elector.release()
        if lost.is_set():
            sys.exit(1)
