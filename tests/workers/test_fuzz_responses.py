"""Property-based: whatever a server answers (malformed SSE, non-JSON, HTML error pages, enormous
lines, wrong types, stalls), the benchmark returns a measurement or a one-line BenchmarkError, and
the gate a verdict whose reasons are one short line; an HTML page is summarised, never dumped."""

from __future__ import annotations

import asyncio
import json

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from core.errors import BenchmarkError
from core.types import BenchConfig, GateConfig, GatePrompt
from workers.bench import run_benchmark
from workers.gate import run_gate
from workers.replies import body_summary

FUZZ = settings(max_examples=40, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
                suppress_health_check=[HealthCheck.too_slow])
HTML = ("<!DOCTYPE html><html><head><title>502 Bad Gateway</title><style>body{}</style></head>"
        "<body><h1>502 Bad Gateway</h1>" + "<p>nginx</p>" * 500 + "</body></html>")

good_event = st.builds(lambda n: "data: " + json.dumps({"text": "x" * n, "meta_info": {
    "completion_tokens": n, "finish_reason": None}}), st.integers(0, 64))
bad_line = st.sampled_from(["data: {not json", "data: []", "data: 17", "data: {\"meta_info\": 3}",
                            "event: ping", "data: " + json.dumps({"meta_info": {"completion_tokens": "many"}}),
                            "data: " + "x" * 200_000, "\x00\x01", HTML]) | st.text(max_size=80)
reply = st.tuples(st.sampled_from([200, 200, 200, 400, 404, 500, 502, 503]),
                  st.lists(good_event | bad_line, max_size=8), st.booleans(), st.booleans())
CFG = BenchConfig(concurrency=4, input_len=8, output_len=64, warmup_s=0.05, duration_s=0.3,
                  request_timeout_s=0.5)


def _transport(status: int, lines: list[str], finish: bool, stall: bool) -> httpx.MockTransport:
    async def handler(request: httpx.Request) -> httpx.Response:
        if stall:
            await asyncio.sleep(1.0)  # a stall past the window (a mock transport has no timeouts)
        if status != 200:
            return httpx.Response(status, text=HTML if status >= 500 else "\n".join(lines))
        body = "\n\n".join([*lines, *(["data: " + json.dumps({"text": "x", "meta_info": {
            "completion_tokens": 64, "finish_reason": {"type": "length"}}}), "data: [DONE]"] if finish else [])])
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handler)


def _one_short_line(text: str) -> None:
    assert "\n" not in text and len(text) < 600 and "<html" not in text.lower() and "<p>" not in text, text


@FUZZ
@given(answer=reply)
def test_any_stream_gives_a_measurement_or_one_line(answer: tuple[int, list[str], bool, bool]) -> None:
    try:
        result = asyncio.run(run_benchmark("http://server", CFG, transport=_transport(*answer)))
    except BenchmarkError as exc:
        _one_short_line(str(exc))
    else:
        assert result.tok_s >= 0
        for error in result.errors:
            _one_short_line(error)


@FUZZ
@given(answer=st.tuples(st.sampled_from([200, 500, 502]),
                        st.sampled_from(["", "[]", "{}", "null", '{"text": 5}', '{"text": "391", "output_ids": "x"}',
                                         '{"text": "391", "output_ids": [1, "2"]}', HTML, "x" * 100_000])
                        | st.text(max_size=60)))
def test_any_gate_reply_gives_a_verdict_with_a_one_line_reason(answer: tuple[int, str]) -> None:
    status, body = answer
    transport = httpx.MockTransport(lambda request: httpx.Response(status, text=body))
    gate = GateConfig(prompts=(GatePrompt(text="What is 17*23?", expect="391"),))
    result = asyncio.run(run_gate("http://server", gate, transport=transport, timeout_s=2))
    for check in result.checks:
        _one_short_line(check.reason)


def test_an_html_error_page_is_summarised_by_its_title() -> None:
    assert body_summary(HTML) == "HTML page: 502 Bad Gateway"
    assert body_summary("  a\n\n b  ") == "a b"
    assert len(body_summary("word " * 10_000)) <= 160
