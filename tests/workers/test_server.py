"""The server process wrapper with a stand-in server: watching its log for fatal lines."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from core.types import LaunchCommand
from tests.conftest import wait_for
from workers.server import ServerProcess, free_port

HALF_A_FATAL_LINE = """
import pathlib, sys, time
sys.stderr.write("[2026-11-29 TP0] Scheduler hit an exc"); sys.stderr.flush()
trigger = pathlib.Path(sys.argv[1])
while not trigger.exists():
    time.sleep(0.01)
sys.stderr.write("eption: torch.OutOfMemoryError: CUDA out of memory\\n"); sys.stderr.flush()
time.sleep(600)  # like a wedged SGLang: it does not exit by itself
"""


def test_a_line_written_in_two_pieces_is_read_whole(tmp_path: Path) -> None:
    trigger = tmp_path / "go"
    cmd = LaunchCommand(argv=(sys.executable, "-c", HALF_A_FATAL_LINE, str(trigger)), env={})
    server = ServerProcess(cmd, tmp_path / "server.log", url=f"http://127.0.0.1:{free_port()}")
    server.start()
    try:
        wait_for(lambda: "Scheduler hit an exc" in server.read_log(), 30, "the first half of the line")
        assert server.read_new_lines() == ""  # half a line is not a line yet
        trigger.touch()
        wait_for(lambda: "CUDA out of memory" in server.read_log(), 30, "the rest of the line")
        assert server.read_new_lines() == (
            "[2026-11-29 TP0] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory\n")
        assert server.read_new_lines() == ""
    finally:
        server.stop()
    assert not server.alive()


PARENT_WITH_A_CHILD = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import signal, sys, time
def on_term(*_):
    print("child: SIGTERM from outside", file=sys.stderr, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("child up", file=sys.stderr, flush=True)
time.sleep(600)
'''])
def on_term(*_):  # like SGLang's main process: it stops its own children
    print("parent: SIGTERM, stopping my child", file=sys.stderr, flush=True)
    time.sleep(0.5)  # a child signalled directly would have said so by now
    child.kill()
    child.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
time.sleep(600)
"""


def test_stop_lets_the_main_process_stop_its_children(tmp_path: Path) -> None:
    cmd = LaunchCommand(argv=(sys.executable, "-c", PARENT_WITH_A_CHILD), env={})
    server = ServerProcess(cmd, tmp_path / "server.log", url=f"http://127.0.0.1:{free_port()}")
    server.start()
    wait_for(lambda: "child up" in server.read_log(), 30, "the child to start")
    children = [p for p in server.tree() if p.pid != server.proc.pid]  # type: ignore[union-attr]
    assert len(children) == 1
    server.stop()
    log = server.read_log()
    assert "parent: SIGTERM, stopping my child" in log
    assert "child: SIGTERM from outside" not in log, "only the main process is signalled first"
    assert not server.alive() and not children[0].is_running()


OLD_SGLANG_READINESS = """
import sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health_generate":
            time.sleep(1.5)  # it generates a token first, like SGLang before /ready
        self.send_response(200 if self.path == "/health_generate" else 404)
        self.end_headers()
    def log_message(self, *a): pass
time.sleep(0.5)  # loading
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_startup_time_does_not_count_health_generates_own_generation(tmp_path: Path) -> None:
    port = free_port()
    cmd = LaunchCommand(argv=(sys.executable, "-c", OLD_SGLANG_READINESS, str(port)), env={})
    server = ServerProcess(cmd, tmp_path / "server.log", url=f"http://127.0.0.1:{port}")
    server.start()
    try:
        t0 = time.monotonic()
        startup = server.wait_ready(30)
        waited = time.monotonic() - t0
    finally:
        server.stop()
    assert waited >= 1.5  # the readiness probe itself took its 1.5 s ...
    assert startup <= waited - 1.4  # ... which startup_s leaves out


def test_a_trial_spanning_several_groups_sees_all_their_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4")  # what Ray gave the actor of the block's first group
    show = "import os; print('visible', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)"
    cmd = LaunchCommand(argv=(sys.executable, "-c", show), env={})
    spanning = ServerProcess(cmd, tmp_path / "a.log", url="http://127.0.0.1:9", visible_gpus=("4", "5", "6", "7"))
    own = ServerProcess(cmd, tmp_path / "b.log", url="http://127.0.0.1:9")
    for server in (spanning, own):
        server.start()
        wait_for(lambda s=server: not s.alive(), 30, "the process to exit")
    assert "visible 4,5,6,7" in spanning.read_log()
    assert "visible 4\n" in own.read_log()
