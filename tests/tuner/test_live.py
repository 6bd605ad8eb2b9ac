"""The sweep's live view: log lines when not a terminal, a table with phases and ETA when it is."""

from __future__ import annotations

import dataclasses
import io
import time
from datetime import datetime

from rich.console import Console

from db.store import RunRow
from tuner.live import GroupView, SweepView, config_summary


def _run(n: int, tok_s: float | None, status: str = "ok", baseline: bool = False) -> RunRow:
    return RunRow(id=n, trial_number=n, config_key="k", baseline=baseline, params={"speculative.mtp.steps": 3},
                  flags={}, argv=[], env={}, status=status, failure_kind=None if tok_s else "oom",
                  failure_reason="" if tok_s else "CUDA out of memory", log_tail="", tok_s=tok_s, metrics=None,
                  gate=None, startup_s=None, sglang_version="", node="", gpu_ids=[], started_at=datetime.now(),
                  finished_at=None, cached_from=None)


def test_plain_lines_when_not_a_terminal() -> None:
    out = io.StringIO()
    view = SweepView(Console(file=out, force_terminal=False, width=200), "s", budget=4, time_scale=100)
    view.groups = [GroupView("0"), GroupView("1")]
    with view:
        view.started(0, 7, {"quant_format": "nvfp4"})
        view.set_phase(0, 7, "measuring", time.time())
        view.finished(_run(7, 2500.0), 5.0, launched=1)
        view.finished(_run(8, None, "infeasible"), 2.0, launched=2)
    text = out.getvalue()
    assert "[group 0] trial 7 started: quant_format=nvfp4" in text
    assert "[group 0] trial 7: measuring" in text
    assert "trial 7 [1/4] steps=3 -> 2500.0 tok/s@C16 (modelled 25.00)" in text
    assert "trial 8 [2/4]" in text and "infeasible: oom CUDA out of memory" in text
    assert view.best is not None and view.best.trial_number == 7
    assert view.eta_s() == (5.0 + 2.0) / 2 * 2 / 2


def test_live_table_on_a_terminal() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160, color_system=None)
    view = SweepView(console, "demo", budget=10)
    view.groups = [GroupView("0 host gpu 0,1")]
    view.started(0, 3, {"ep_size": 2})
    view.finished(_run(2, 30.0, baseline=True), 4.0, launched=3)
    console.print(view.render())
    text = out.getvalue()
    assert "sweep demo: 3/10 launched" in text and "ep_size=2" in text and "launching" in text
    assert "best: trial 2 30.0 tok/s@C16" in text and "ETA" in text


def test_config_summary_keeps_digits_and_never_cuts_a_setting() -> None:
    assert config_summary({}) == "baseline (base settings only)"
    assert config_summary({"a.b.c": 1, "d": "x"}) == "c=1 d=x"
    assert config_summary({"mem_fraction_static": 0.001, "x": 0.30000000000000004}) == \
        "mem_fraction_static=0.001 x=0.3"
    many = {f"p{i}": "v" * 10 for i in range(20)}
    short = config_summary(many, limit=40)
    assert short == "p0=vvvvvvvvvv p1=vvvvvvvvvv +18 more" and len(short) <= 40
    assert config_summary(many).count("=") == 20  # the log line has them all


def test_answers_without_a_launch_say_so_and_the_counter_never_repeats() -> None:
    out = io.StringIO()
    view = SweepView(Console(file=out, force_terminal=False, width=100), "s", budget=4)
    cached = dataclasses.replace(_run(5, 2500.0, "cached"), cached_from=2)
    long_reason = dataclasses.replace(_run(6, None, "infeasible"), failure_reason="word " * 40 + "END")
    with view:
        view.finished(_run(2, 2500.0), 5.0, launched=1)
        view.finished(cached, None, launched=1)
        view.finished(dataclasses.replace(_run(3, None, "avoided"), failure_reason="learned: x=1"), None, launched=1)
        view.finished(long_reason, 1.0, launched=2)
    text = out.getvalue()
    assert "trial 5 [no launch] steps=3 -> 2500.0 tok/s@C16, from trial 2 (not launched)" in text
    assert "trial 3 [no launch]" in text
    assert text.count("[1/4]") == 1 and text.count("[2/4]") == 1
    assert "END" in text  # the whole reason, wrapped, not cut
