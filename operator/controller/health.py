"""A /healthz endpoint for the operator pod's liveness probe, up from process start (also while a
replica waits for the leader Lease, so a standby is not restarted)."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        ok = self.path.split("?")[0] == "/healthz"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"ok\n" if ok else b"not found\n")

    def log_message(self, *args):  # probes every few seconds would flood the log
        pass


def serve_health(port: int, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), _Handler)
    threading.Thread(target=server.serve_forever, name="healthz", daemon=True).start()
    return server
