"""``tuner dashboard``: optuna-dashboard over a sweep database, with its artifact store.

Each trial shows its metrics (user attributes), its server log and launch script (artifacts), and
infeasible trials as infeasible (dashboard 0.21 reads the legacy ``constraints`` attribute, which
the sweep writes beside Optuna 5's). Served by a threaded WSGI server; binds to 127.0.0.1 unless
told otherwise (the dashboard has no authentication and can write to the study).
"""

from __future__ import annotations

import threading
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from core.errors import ConfigError
from db.location import check, database
from tuner.recording import artifact_store
from tuner.study_db import rdb_storage


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def make_dashboard(db_path: str | Path, host: str = "127.0.0.1", port: int = 8080) -> WSGIServer:
    """A ready-to-serve dashboard server (call ``serve_forever``; ``shutdown`` from another thread)."""
    import optuna_dashboard

    db = database(db_path)
    check(db, writing=False)
    storage = rdb_storage(db, read_only=True)
    app = optuna_dashboard.wsgi(storage, artifact_store=artifact_store(db, create=False))
    try:
        return make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    except OSError as exc:
        raise ConfigError(f"--host {host} --port {port}: cannot listen: {exc.strerror}") from exc


def serve_in_thread(server: WSGIServer) -> threading.Thread:
    """Serve in a daemon thread (tests, screenshots)."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
