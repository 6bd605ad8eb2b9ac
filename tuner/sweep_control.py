"""How a running sweep is asked to stop: the CLI's SIGINT/SIGTERM handler calls ``request_stop``;
the loop polls ``STOP`` and ends with every server stopped and every trial in flight recorded."""

from __future__ import annotations

import threading

STOP = threading.Event()  # set by the CLI's SIGINT/SIGTERM handler; checked by the loop
LOOP_POLLS = threading.Event()  # set while the loop runs: it checks STOP itself (twice a second)


class SweepInterrupted(Exception):
    """Ctrl-C / SIGTERM: every server was stopped, the trials in flight were re-queued."""


def request_stop() -> bool:
    """Ask a running sweep to stop. True when the caller (a signal handler) should raise
    KeyboardInterrupt to cut a blocking step short: only for the first request, and only outside the
    loop, which polls STOP itself, so a raise never cuts a record in half and a second or third
    Ctrl-C never cuts short the stopping of servers and the recording of trials in flight."""
    first = not STOP.is_set()
    STOP.set()
    return first and not LOOP_POLLS.is_set()
