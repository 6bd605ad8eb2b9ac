"""Rich renderings of spaces, trials and benchmark results for the terminal (no logic here)."""

from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table

from core.types import RunStatus
from tuner.lead import describe, lead
from tuner.parallelism import gpu_sizes, gpus_needed, slot_gpus
from tuner.space import Param, SearchSpace


def _domain(p: Param) -> str:
    if p.kind == "categorical":
        return ", ".join(map(str, p.choices))
    step = f" step {p.step:g}" if p.step else ""
    return f"{p.kind} [{p.low:g}, {p.high:g}]{step}{' log' if p.log else ''}"


def space_table(space: SearchSpace) -> Table:
    """The parameter table of a space."""
    table = Table(title=f"{space.name} ({space.path})", title_justify="left")
    for col in ("parameter", "sets", "values", "only when"):
        table.add_column(col)
    for p in space.params:
        sets = "composite" if p.target is None else (
            f"env {p.target[1]}" if p.target[0] == "env" else p.target[1])
        when = ", ".join(f"{k}={'|'.join(map(str, v))}" for k, v in p.conditions)
        table.add_row(p.name, sets, _domain(p), when)
    return table


def print_validation(console: Console, space: SearchSpace, version: str, arch: str | None) -> None:
    """What `tuner validate` prints: table, cardinality, pruned choices, forbid rules."""
    console.print(space_table(space))
    card = space.cardinality()
    size = "continuous (infinite)" if math.isinf(card) else f"{card:,}"
    written = len(space.file.forbid)
    derived = len(space.forbid) - written
    parallel = f" + {derived} rule(s) for the parallel sizes SGLang refuses" if derived else ""
    console.print(f"SGLang {version}, GPU {arch or 'any (no hardware rules applied)'}: "
                  f"[bold]{size}[/bold] configurations after {written} forbid rule(s){parallel}"
                  f" and hardware rules")
    for pruned in space.pruned:
        console.print(f"  pruned {pruned.reason}", soft_wrap=True)
    sizes = gpu_sizes(space)
    if len(sizes) > 1:
        console.print(f"servers of {'/'.join(map(str, sizes))} GPUs: each trial holds the GPUs its settings need "
                      f"(GPU groups of {slot_gpus(sizes)}); objective {space.file.objective}")


def fmt_num(value: Any, digits: int = 1) -> str:
    """A number for a table cell, '-' for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def bench_table(result: Any, title: str) -> Table:
    """The metrics of one benchmark run."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    for col in ("mean", "p50", "p90", "p99"):
        table.add_column(col, justify="right")
    for name, stats in (("TTFT (ms)", result.ttft_ms), ("TPOT (ms)", result.tpot_ms),
                        ("ITL (ms)", result.itl_ms), ("E2E (ms)", result.e2e_ms)):
        table.add_row(name, *(fmt_num(stats[k], 2) for k in ("mean", "p50", "p90", "p99")))
    return table


def print_bench(console: Console, result: Any, url: str) -> None:
    """What `tuner bench` prints."""
    windows = ", ".join(f"{v:.1f}" for v in result.window_tok_s)
    console.print(f"[bold]tok/s@C{result.concurrency}: {result.tok_s:.2f}[/bold]  (windows: {windows}; "
                  f"spread {result.spread:.1%})")
    held = "held" if result.held_concurrency else "[red]NOT held[/red]"
    console.print(f"achieved concurrency {result.achieved_concurrency:.2f} ({held}); "
                  f"{result.completed} requests completed, {result.failed} failed; "
                  f"{result.request_throughput:.2f} req/s; per-user {result.per_user_tok_s:.2f} tok/s")
    if result.accept_length:
        console.print(f"speculative accept length (this run): {result.accept_length:.2f}")
    console.print(bench_table(result, url))
    for err in result.errors:
        console.print(f"  error: {err}", markup=False)


def _result_cell(run: Any, time_scale: float, results: Any = None) -> str:
    if run.tok_s is not None and run.status in (RunStatus.OK, RunStatus.CACHED):
        samples = results.samples(run.config_key) if results is not None and run.repeat_of is None else []
        value = results.median(run) if len(samples) > 1 else run.tok_s
        modelled = f" ({value / time_scale:.2f})" if time_scale != 1 else ""
        early = " early-stopped" if (run.metrics or {}).get("early_stopped") else ""
        confirmed = f" median of {len(samples)}: " + "/".join(f"{v:.1f}" for v in samples) if len(samples) > 1 else ""
        per_gpu = ""
        if results is not None and results.per_gpu:
            gpus = gpus_needed(run.flags)
            per_gpu = f"; {value / gpus:.1f}{f' ({value / gpus / time_scale:.2f})' if time_scale != 1 else ''} " \
                      f"per GPU of {gpus}"
        return f"{value:.1f}{modelled}{early}{confirmed}{per_gpu}"
    return "-"


def runs_table(results: Any, limit: int | None = None) -> Table:
    """`tuner show`: trials sorted by tok/s, failures with their kind and reason."""
    sweep = results.sweep
    scale = sweep.time_scale or 1.0
    title = f"study {sweep.study_name}: {len(results.runs)} trials ({sweep.engine}, SGLang {sweep.sglang_version}, " \
            f"{sweep.gpu_count} x {sweep.gpu_name})"
    table = Table(title=title, title_justify="left")
    head = "tok/s@C16" + (f" (modelled, /{scale:g})" if scale != 1 else "")
    roofline = sweep.roofline_tok_s
    for col in ("trial", "status", head, *(["% roofline"] if roofline else []), "TTFT p50 ms", "startup s",
                "config / reason"):
        table.add_column(col)
    for run in results.ranked()[:limit]:
        ttft = (run.metrics or {}).get("ttft_ms", {}).get("p50")
        what = ("baseline: " if run.baseline else "") + (
            " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in run.params.items()) or "base settings")
        if run.status not in (RunStatus.OK, RunStatus.CACHED) or run.tok_s is None:
            what += f"\n[red]{run.failure_kind or run.status}[/red]: {run.failure_reason[:160]}"
        status = run.status + (f" (= #{run.cached_from})" if run.cached_from is not None else "") + (
            f" (repeat of #{run.repeat_of})" if run.repeat_of is not None else "")
        share = ([f"{results.median(run) / scale / roofline:.1%}" if run.status == RunStatus.OK and run.tok_s else "-"]
                 if roofline else [])
        table.add_row(str(run.trial_number), status, _result_cell(run, scale, results), *share, fmt_num(ttft),
                      fmt_num(run.startup_s), what)
    return table


def print_summary(console: Console, results: Any) -> None:
    """Best vs baseline, roofline share, failures by kind."""
    sweep = results.sweep
    best, base = results.best(), results.baseline()
    scale = sweep.time_scale or 1.0
    if best is None:
        console.print("[red]no feasible configuration measured[/red]")
    else:
        best_tok_s = results.score(best)
        line = f"best{' per GPU' if results.per_gpu else ''}: trial {best.trial_number} at " \
               f"{_result_cell(best, scale, results)} tok/s@C16"
        if base is not None and base.trial_number == best.trial_number:
            line += " - the baseline itself: no sampled configuration beat the base settings"
        elif base is not None and base.tok_s:
            line += f", {best_tok_s / results.score(base) - 1:+.1%} vs baseline (trial {base.trial_number}, " \
                    f"{_result_cell(base, scale, results)})"
        elif base is not None:
            line += f"; the baseline failed ({base.failure_kind})"
        if sweep.roofline_tok_s:
            line += f"; {results.median(best) / scale / sweep.roofline_tok_s:.1%} of the {sweep.roofline_tok_s:g} " \
                    "tok/s roofline"
        console.print(line)
        console.print("  " + (" ".join(f"{k}={v}" for k, v in best.params.items()) or "base settings only"),
                      markup=False)
        found = lead(results)
        if found is not None:
            console.print("lead: " + describe(found), markup=False, highlight=False, soft_wrap=True)
    busy = results.gpu_busy()
    sizes = sorted({len(r.gpu_ids) for r in results.runs if r.gpu_ids})
    if busy is not None and len(sizes) > 1:
        console.print(f"GPUs busy {busy[0]:.1%} of the sweep's time on {busy[1]} GPUs (trials of "
                      f"{'/'.join(map(str, sizes))} GPUs)")
    kinds = results.failures_by_kind()
    if kinds:
        console.print("failures: " + ", ".join(f"{k} {n}" for k, n in kinds.items()))
    suspected = [rule for rule in results.rules if "(suspected, " in rule]
    for rule in results.rules:
        if rule not in suspected:
            console.print(f"learned: {rule}", markup=False, highlight=False, soft_wrap=True)
    if suspected:
        console.print(f"{len(suspected)} suspected rule(s) only steer the search (all of them: show --json, report)",
                      markup=False, highlight=False)
    if results.avoided():
        console.print(f"{results.avoided()} proposal(s) matched a learned rule and were not launched (no budget)")
    _print_notices(console, results)
    _print_profile(console, results)
    _print_front(console, results)
    _print_startup_costs(console, results)
    console.print(f"export it: tuner export --study {sweep.study_name} -o launch.sh", markup=False)


def _print_notices(console: Console, results: Any) -> None:
    """What SGLang said about the best configuration (with the fix), and how often elsewhere."""
    best = results.best()
    if best is not None:
        for notice in results.notices.get(best.trial_number, ()):
            console.print(f"SGLang about the best: {notice.describe()}", markup=False, highlight=False,
                          soft_wrap=True)
    kinds = results.notices_by_kind()
    if kinds:
        console.print("SGLang warnings and adjustments: " + ", ".join(
            f"{kind} ({len(ns)} trial{'s' if len(ns) > 1 else ''})" for kind, (_, ns) in kinds.items())
            + " (show --json, report)", markup=False, highlight=False, soft_wrap=True)


def _print_profile(console: Console, results: Any, shown: int = 5) -> None:
    """Where the best configuration's decode GPU time goes (``--profile-best``)."""
    from core.types import KernelProfile

    run = results.best_profile()
    if run is None:
        return
    if "error" in run.profile:
        console.print(f"profile of the best (trial {run.trial_number}): none, {run.profile['error']}", markup=False,
                      highlight=False, soft_wrap=True)
        return
    prof = KernelProfile.from_dict(run.profile)
    console.print(f"where the best's GPU time goes (trial {run.trial_number}, {prof.steps} decode steps under "
                  f"SGLang's profiler, {prof.kernel_count} kernels): " + ", ".join(
                      f"{k.short_name()} {k.share:.1%}" for k in prof.kernels[:shown]), markup=False, highlight=False,
                  soft_wrap=True)
    console.print(f"  trace (chrome://tracing, ui.perfetto.dev): {prof.trace_path}", markup=False, highlight=False,
                  soft_wrap=True)


def _print_startup_costs(console: Console, results: Any, shown: int = 4) -> None:
    """The settings that change startup most (fitted over the sweep's launches)."""
    import statistics

    from tuner.startup_cost import startup_costs

    costs = startup_costs(results.runs)
    startups = [r.startup_s for r in results.runs if r.startup_s is not None]
    if not costs or not startups:
        return
    floor = 0.05 * statistics.median(startups)
    big = [c for c in costs if abs(c.seconds) >= floor][:shown]
    if big:
        console.print("startup cost of a setting (vs its most launched value): " + ", ".join(
            f"{c.name}={c.value} {c.seconds:+.3g} s vs {c.reference}" for c in big), markup=False, highlight=False,
            soft_wrap=True)


def _print_front(console: Console, results: Any) -> None:
    """The Pareto front of tok/s@C16 against TTFT p99, when it has more than one point."""
    from tuner.pareto import front

    points = front(results)
    if len(points) < 2:
        return
    console.print("trade-off (no other configuration is both faster and quicker to the first token):",
                  markup=False)
    for p in points:
        console.print(f"  trial {p.run.trial_number}: {p.tok_s:.1f} tok/s@C16, TTFT p99 {p.ttft_p99_ms:.4g} ms, "
                      f"{p.per_user_tok_s:.1f} tok/s per user", markup=False, highlight=False)
    for p in points:
        curve = results.curve(p.run)
        if curve:
            console.print(f"  trial {p.run.trial_number} at other concurrencies: " + ", ".join(
                f"C{b['concurrency']} {b['tok_s']:.1f} tok/s ({b['per_user_tok_s']:.1f} per user, TTFT p99 "
                f"{b['ttft_ms']['p99']:.4g} ms)" for b in curve), markup=False, highlight=False, soft_wrap=True)
    console.print(f"  pick one: tuner export --study {results.sweep.study_name} --pick "
                  f"'ttft_p99<={points[-1].ttft_p99_ms:.4g}ms' -o launch.sh", markup=False, highlight=False)
