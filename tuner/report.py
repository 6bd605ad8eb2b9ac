"""``tuner report``: one self-contained HTML file (plotly.js inlined once, no CDN) about a sweep:
optimization history, parameter importances, parallel coordinates, tok/s by quantization format x
MoE backend, failures by kind, best vs baseline, and the top five with their launch commands."""

from __future__ import annotations

import html
import warnings
from pathlib import Path

import optuna
import plotly.graph_objects as go

from core.types import RunStatus
from db.store import RunRow
from tuner.export import launch_script, write_output
from tuner.lead import describe, lead
from tuner.results import SweepResults, load_results
from tuner.study_db import open_study


def _section(title: str, body: str) -> str:
    return f"<section><h2>{html.escape(title)}</h2>{body}</section>"


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _pick_axes(runs: list[RunRow]) -> tuple[str, str] | None:
    names: list[str] = []
    for r in runs:
        names += [k for k in r.params if k not in names]
    quant = next((n for n in names if "quant" in n or "checkpoint" in n), None)
    backend = next((n for n in names if "moe_runner" in n), None)
    if quant and backend:
        return quant, backend
    top = [n for n in names if "." not in n][:2]
    return (top[0], top[1]) if len(top) == 2 else None


def quant_backend_figure(results: SweepResults) -> go.Figure | None:
    """Best tok/s@C16 per (quantization format, MoE backend); failed cells annotated."""
    axes = _pick_axes(results.runs)
    if axes is None:
        return None
    xs_name, ys_name = axes
    runs = [r for r in results.runs if xs_name in r.params and ys_name in r.params]
    xs = sorted({str(r.params[xs_name]) for r in runs})
    ys = sorted({str(r.params[ys_name]) for r in runs})
    z: list[list[float | None]] = [[None] * len(xs) for _ in ys]
    text = [[""] * len(xs) for _ in ys]
    for r in runs:
        i, j = ys.index(str(r.params[ys_name])), xs.index(str(r.params[xs_name]))
        if r.status in (RunStatus.OK, RunStatus.CACHED) and r.tok_s is not None:
            if z[i][j] is None or r.tok_s > (z[i][j] or 0):
                z[i][j] = r.tok_s
                text[i][j] = f"{r.tok_s:.1f}"
        elif z[i][j] is None and r.failure_kind:
            text[i][j] = r.failure_kind
    fig = go.Figure(go.Heatmap(z=z, x=xs, y=ys, text=text, texttemplate="%{text}", colorscale="Viridis",
                               colorbar={"title": "tok/s@C16"}))
    fig.update_layout(xaxis_title=xs_name, yaxis_title=ys_name, height=420)
    return fig


def failures_figure(results: SweepResults) -> go.Figure | None:
    """Launched trials that failed, per failure kind."""
    kinds = results.failures_by_kind()
    if not kinds:
        return None
    fig = go.Figure(go.Bar(x=list(kinds), y=list(kinds.values()), marker_color="#d62728"))
    fig.update_layout(yaxis_title="trials", height=360)
    return fig


def pareto_figure(results: SweepResults) -> go.Figure | None:
    """tok/s@C16 against TTFT p99 of every measured configuration, the Pareto front joined."""
    from tuner.pareto import front, points

    every = points(results)
    if len(every) < 2:
        return None
    edge = front(results)
    fig = go.Figure([
        go.Scatter(x=[p.ttft_p99_ms for p in every], y=[p.tok_s for p in every], mode="markers", name="measured",
                   text=[f"trial {p.run.trial_number}" for p in every], marker={"color": "#9aa"}),
        go.Scatter(x=[p.ttft_p99_ms for p in edge], y=[p.tok_s for p in edge], mode="lines+markers", name="front",
                   text=[f"trial {p.run.trial_number}" for p in edge], marker={"color": "#d62728", "size": 10})])
    fig.update_layout(xaxis_title="TTFT p99 (ms)", yaxis_title="tok/s@C16", height=420)
    return fig


def startup_cost_figure(results: SweepResults) -> go.Figure | None:
    """Seconds of server startup each setting adds (or saves) over its parameter's most launched value."""
    from tuner.startup_cost import startup_costs

    costs = sorted(startup_costs(results.runs), key=lambda c: c.seconds)
    if not costs:
        return None
    fig = go.Figure(go.Bar(x=[c.seconds for c in costs], y=[f"{c.name}={c.value} (vs {c.reference})" for c in costs],
                           orientation="h", text=[f"{c.launches} launch(es)" for c in costs]))
    fig.update_layout(xaxis_title="startup seconds", height=max(300, 22 * len(costs) + 120))
    return fig


def front_curve_figure(results: SweepResults) -> go.Figure | None:
    """tok/s against concurrency for the trade-off's configurations measured at several (``--front-at``)."""
    from tuner.pareto import front

    fig = go.Figure()
    for p in front(results):
        curve = results.curve(p.run)
        if curve:
            xs = sorted({16, *(b["concurrency"] for b in curve)})
            ys = {b["concurrency"]: b["tok_s"] for b in curve} | {16: p.tok_s}
            fig.add_trace(go.Scatter(x=xs, y=[ys[x] for x in xs], mode="lines+markers",
                                     name=f"trial {p.run.trial_number}"))
    if not fig.data:
        return None
    fig.update_layout(xaxis_title="concurrency", xaxis_type="log", yaxis_title="tok/s", height=400)
    return fig


def profile_figure(results: SweepResults) -> go.Figure | None:
    """The best configuration's top GPU kernels by share of decode time (``--profile-best``)."""
    from core.types import KernelProfile

    run = results.best_profile()
    if run is None or "error" in (run.profile or {}):
        return None
    prof = KernelProfile.from_dict(run.profile or {})
    kernels = list(reversed(prof.kernels))
    fig = go.Figure(go.Bar(x=[k.share * 100 for k in kernels], y=[k.short_name() for k in kernels], orientation="h",
                           text=[f"{k.share:.1%}, {k.calls} calls" for k in kernels]))
    fig.update_layout(xaxis_title=f"% of GPU kernel time (trial {run.trial_number}, {prof.steps} decode steps)",
                      height=max(300, 26 * len(kernels) + 120))
    return fig


def best_vs_baseline_figure(results: SweepResults) -> go.Figure | None:
    """Baseline and best tok/s@C16 side by side (and the roofline when known)."""
    best, base = results.best(), results.baseline()
    if best is None:
        return None
    names = [f"best (trial {best.trial_number})"]
    values = [results.median(best)]
    if base is not None and base.tok_s:
        names.insert(0, f"baseline (trial {base.trial_number})")
        values.insert(0, results.median(base))
    scale = results.sweep.time_scale or 1.0
    if results.sweep.roofline_tok_s:
        names.append("roofline")
        values.append(results.sweep.roofline_tok_s * scale)
    fig = go.Figure(go.Bar(x=names, y=values, text=[f"{v:.1f}" for v in values], textposition="auto"))
    fig.update_layout(yaxis_title="tok/s@C16" + (f" (simulator, x{scale:g})" if scale != 1 else ""), height=360)
    return fig


def _optuna_figures(study: optuna.Study) -> list[tuple[str, go.Figure | None, str]]:
    out: list[tuple[str, go.Figure | None, str]] = []
    vis = optuna.visualization
    for title, make in (("Optimization history", vis.plot_optimization_history),
                        ("Parameter importances", vis.plot_param_importances),
                        ("Parallel coordinates", vis.plot_parallel_coordinate)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out.append((title, make(study), ""))
        except (ValueError, RuntimeError, ZeroDivisionError) as exc:
            out.append((title, None, f"not enough data: {exc}"))
    return out


def _top_table(results: SweepResults) -> str:
    rows = []
    for r in results.measured()[:5]:
        script = html.escape(launch_script(r, results.sweep, samples=results.samples(r.config_key)))
        rows.append(f"<tr><td>{r.trial_number}</td><td>{results.score(r):.1f}</td><td><pre>{script}</pre></td></tr>")
    if not rows:
        return _note("no feasible trial")
    return "<table><tr><th>trial</th><th>tok/s@C16</th><th>launch command</th></tr>" + "".join(rows) + "</table>"


def build_report(results: SweepResults, study: optuna.Study) -> str:
    """The report as one HTML string."""
    sections: list[tuple[str, go.Figure | None, str]] = _optuna_figures(study)
    sections += [("tok/s@C16 by quantization format x MoE backend", quant_backend_figure(results),
                  "no quantization-format / MoE-backend parameters in this space"),
                 ("Trade-off: tok/s@C16 against TTFT p99 (Pareto front)", pareto_figure(results),
                  "fewer than two measured configurations"),
                 ("The trade-off's configurations at other concurrencies", front_curve_figure(results),
                  "not measured (tuner sweep --front-at 1,4,64)"),
                 ("Failures by kind", failures_figure(results), "no failures"),
                 ("What each setting costs to start (fitted over the launches)", startup_cost_figure(results),
                  "fewer than three startups measured"),
                 ("Best vs baseline", best_vs_baseline_figure(results), "no feasible trial"),
                 ("Where the best's decode GPU time goes (SGLang's profiler)", profile_figure(results),
                  "not profiled (tuner sweep --profile-best)")]
    parts: list[str] = []
    plotly_included = False
    for title, fig, missing in sections:
        if fig is None:
            parts.append(_section(title, _note(missing)))
            continue
        parts.append(_section(title, fig.to_html(full_html=False, include_plotlyjs=not plotly_included)))
        plotly_included = True
    sweep = results.sweep
    best = results.best()
    summary = (f"{len(results.runs)} trials; engine {sweep.engine}; SGLang {sweep.sglang_version}; "
               f"{sweep.gpu_count} x {sweep.gpu_name} ({sweep.gpu_arch}); best "
               f"{results.score(best):.1f} tok/s@C16 (trial {best.trial_number})" if best else "no feasible trial")
    head = ("<!doctype html><html><head><meta charset='utf-8'><title>sglang-tuner report: "
            f"{html.escape(sweep.study_name)}</title><style>body{{font-family:sans-serif;margin:2em;max-width:1200px}}"
            "pre{background:#f4f4f4;padding:.5em;font-size:12px;overflow-x:auto}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px;vertical-align:top}"
            ".note{color:#777}</style></head><body>")
    found = lead(results)
    if found is not None:
        summary += ". Lead: " + describe(found)
    return (head + f"<h1>sglang-tuner: {html.escape(sweep.study_name)}</h1><p>{html.escape(summary)}</p>"
            + "".join(parts) + _section("Top five", _top_table(results)) + _notices_section(results)
            + _rules_section(results) + "</body></html>")


def _notices_section(results: SweepResults) -> str:
    """SGLang's warnings and auto-adjustments, by kind: the fix, the trials, one line as printed."""
    kinds = results.notices_by_kind()
    title = "What SGLang said (warnings and auto-adjustments)"
    if not kinds:
        return _section(title, _note("nothing from the catalogue of warnings in the server logs"))
    best = results.best()
    rows = "".join(f"<tr><td>{html.escape(kind)}{' (the best)' if best and best.trial_number in trials else ''}"
                   f"</td><td>{html.escape(n.fix)}</td><td>{', '.join(map(str, trials))}</td>"
                   f"<td><pre>{html.escape(n.line)}</pre></td></tr>" for kind, (n, trials) in kinds.items())
    return _section(title, "<table><tr><th>notice</th><th>what to do</th><th>trials</th><th>as printed</th></tr>"
                    + rows + "</table>")


def _rules_section(results: SweepResults) -> str:
    """The failure rules the sweep learned, and how many proposals they answered without a launch."""
    if not results.rules:
        return _section("Learned failure rules", _note("none: no failure was explained by its settings"))
    items = "".join(f"<li>{html.escape(rule)}</li>" for rule in results.rules)
    return _section("Learned failure rules", f"<ul>{items}</ul>" + _note(
        f"{results.avoided()} proposal(s) matched a rule and were answered without a launch"))


def write_report(db_path: str | Path, study_name: str | None, output: str | Path) -> Path:
    """Build the report of a sweep and write it."""
    results = load_results(db_path, study_name, with_notices=True)
    study = open_study(db_path, results.sweep.study_name, None, create=False)
    out = Path(output)
    write_output(out, build_report(results, study))
    return out
