"""A small HTTP endpoint for a running processor: `/metrics` (Prometheus text format of the
processor's own registry) and `/health` (JSON; HTTP 200 while healthy, 503 once the health probe
fails). Used by `streamcore run --metrics-port`."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from streamcore.computation.stream_processor import StreamProcessor

__all__ = ["MetricsServer"]

logger = logging.getLogger(__name__)


class MetricsServer:
    """Serves `/metrics` and `/health` of `processor` on `host:port` from a daemon thread
    (port 0 picks a free port: read `port` after construction)."""

    def __init__(self, processor: StreamProcessor, port: int, host: str = "127.0.0.1") -> None:
        self.processor = processor
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body = generate_latest(outer.processor.metrics)
                    self._send(200, CONTENT_TYPE_LATEST, body)
                elif path == "/health":
                    status = outer.processor.health()
                    body = json.dumps(status.to_dict()).encode()
                    self._send(200 if status.healthy else 503, "application/json", body)
                else:
                    self._send(404, "text/plain", b"try /metrics or /health\n")

            def _send(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                logger.debug("metrics server: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="streamcore-metrics", daemon=True
        )
        self._thread.start()
        logger.info("metrics on http://%s:%d/metrics", host, self.port)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
