"""The simulated server's HTTP API: SGLang 0.5.23's readiness, info and generation endpoints."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp

from workers.sim.engine import Request, Scheduler, count_prompt_tokens, token_id
from workers.sim.profiler import SimProfiler
from workers.sim.scenario import Outcome, Scenario


@dataclass
class ServerState:
    """What the endpoints share: options, scenario, scheduler and the Starting/Up status."""

    options: dict[str, Any]
    scenario: Scenario
    outcome: Outcome
    scheduler: Scheduler
    version: str
    up: bool = False
    started_at: float = field(default_factory=time.time)

    @property
    def served_model_name(self) -> str:
        """--served-model-name, else --model-path."""
        return str(self.options.get("served_model_name") or self.options.get("model_path") or "default")

    @property
    def skip_tokenizer(self) -> bool:
        """--skip-tokenizer-init: no text in responses."""
        return bool(self.options.get("skip_tokenizer_init"))


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}},
                        status_code=status)


def _sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _meta(state: ServerState, req: Request, prompt_tokens: int, rid: str, t0: float) -> dict[str, Any]:
    meta: dict[str, Any] = {"id": rid, "finish_reason": None, "prompt_tokens": prompt_tokens,
                            "completion_tokens": len(req.pieces), "cached_tokens": 0,
                            "weight_version": "default"}
    if req.finished:
        meta["finish_reason"] = ({"type": "length", "length": len(req.pieces)}
                                 if req.finish_reason == "length" else {"type": "stop", "matched": 2})
        meta["e2e_latency"] = time.perf_counter() - t0
        if state.outcome.accept_len > 1.0:
            verify = max(req.verify_ct, 1)
            meta.update({"spec_verify_ct": verify, "spec_accept_length": len(req.pieces) / verify,
                         "spec_num_correct_drafts": max(len(req.pieces) - verify, 0),
                         "spec_num_proposed_drafts": verify * max(int(state.options.get(
                             "speculative_num_draft_tokens") or 4) - 1, 1)})
            meta["spec_accept_rate"] = meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"]
    return meta


def _generate_event(state: ServerState, req: Request, prompt_tokens: int, rid: str,
                    t0: float) -> dict[str, Any]:
    event: dict[str, Any] = {"output_ids": [token_id(p) for p in req.pieces],
                             "meta_info": _meta(state, req, prompt_tokens, rid, t0)}
    if not state.skip_tokenizer:
        event = {"text": "".join(req.pieces), **event}
    return event


async def _final(gen: AsyncIterator[Request]) -> Request:
    """Run a generation to the end (non-streaming requests) and return its final state."""
    last: Request | None = None
    async for req in gen:
        last = req
    assert last is not None
    return last


class Endpoints:
    """SGLang's HTTP API over one simulated server's state (each method is a route)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.sched = state.scheduler
        self.profiler = SimProfiler(state.scheduler)

    async def health(self, _: HttpRequest) -> Response:
        """/health and /health_generate: 503 until up, then one generated token."""
        if not self.state.up:
            return Response(status_code=503)
        async for _req in self.sched.generate("", 1, True):
            pass
        return Response(status_code=200)

    async def ready(self, _: HttpRequest) -> Response:
        """/ready."""
        return Response(status_code=200 if self.state.up else 503)

    async def model_info(self, _: HttpRequest) -> Response:
        """/model_info and /get_model_info."""
        opts = self.state.options
        return JSONResponse({"model_path": opts.get("model_path"), "served_model_name": self.state.served_model_name,
                             "tokenizer_path": opts.get("tokenizer_path") or opts.get("model_path"),
                             "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                             "load_format": opts.get("load_format"),
                             "model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"]})

    async def server_info(self, _: HttpRequest) -> Response:
        """/server_info and /get_server_info: the options, the version, the simulated figures."""
        state = self.state
        info = {k: v for k, v in state.options.items() if k != "sim_scenario"}
        info.update({"version": state.version, "startup_time": state.started_at, "frontend": "python",
                     "internal_states": [{"avg_spec_accept_length": self.sched.avg_accept_length(),
                                          "last_gen_throughput": state.outcome.tok_s_c16}],
                     "simulated": {"scenario": state.scenario.name, "time_scale": state.scenario.time_scale,
                                   "modelled_tok_s_c16": state.outcome.tok_s_c16 * state.outcome.noise_factor}})
        return JSONResponse(info)

    async def metrics(self, _: HttpRequest) -> Response:
        """/metrics with --enable-metrics: SGLang's Prometheus counters of tokens (404 without it)."""
        if not self.state.options.get("enable_metrics"):
            return Response(status_code=404)
        label = json.dumps(self.state.served_model_name)
        text = ("# HELP sglang:generation_tokens_total Number of generation tokens processed.\n"
                "# TYPE sglang:generation_tokens_total counter\n"
                f"sglang:generation_tokens_total{{model_name={label}}} {float(self.sched.generated_tokens)}\n")
        return Response(text, media_type="text/plain; version=0.0.4")

    async def models(self, _: HttpRequest) -> Response:
        """/v1/models."""
        name = self.state.served_model_name
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "root": name,
                                                         "owned_by": "sglang", "max_model_len": 163840}]})

    async def flush_cache(self, _: HttpRequest) -> Response:
        """/flush_cache."""
        self.sched.flush()
        return Response("Cache flushed.\nPlease check backend logs for more details.", status_code=200)

    async def start_profile(self, http: HttpRequest) -> Response:
        """/start_profile: record the next ``num_steps`` decode steps (see workers.sim.profiler)."""
        try:
            body = await http.json() if await http.body() else {}
        except ValueError:
            return _error("Invalid JSON body")
        problem = self.profiler.start(body if isinstance(body, dict) else {})
        if problem:
            return Response(problem, status_code=500)
        return Response("Start profiling.\n", status_code=200)

    async def stop_profile(self, _: HttpRequest) -> Response:
        """/stop_profile: write the trace now; 500 when nothing is recording (SGLang 0.5.17 does)."""
        if not self.profiler.stop():
            return Response("Profiling is not in progress. Call /start_profile first.", status_code=500)
        return Response("Stop profiling. This will take some time.\n", status_code=200)

    async def generate(self, http: HttpRequest) -> Response:
        """/generate: SGLang's native API, streaming or not."""
        try:
            body = await http.json()
        except ValueError:
            return _error("Invalid JSON body")
        has_text, has_ids = body.get("text") is not None, body.get("input_ids") is not None
        if has_text == has_ids:
            return _error("Either text, input_ids or input_embeds should be provided.")
        if (has_text and not isinstance(body["text"], str)) or (has_ids and not isinstance(body["input_ids"], list)):
            return _error("The simulated engine supports one prompt per request.")
        if has_text and self.state.skip_tokenizer:
            return _error("text input requires a tokenizer; the server runs with --skip-tokenizer-init")
        prompt = body.get("text") or ""
        prompt_tokens = count_prompt_tokens(prompt) if has_text else len(body["input_ids"])
        params = body.get("sampling_params") or {}
        rid = body.get("rid") or uuid.uuid4().hex
        t0 = time.perf_counter()
        gen = self.sched.generate(prompt, int(params.get("max_new_tokens") or 128), bool(params.get("ignore_eos")))
        if not body.get("stream"):
            return JSONResponse(_generate_event(self.state, await _final(gen), prompt_tokens, rid, t0))

        async def stream() -> AsyncIterator[bytes]:
            async for req in gen:
                yield _sse(_generate_event(self.state, req, prompt_tokens, rid, t0))
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def openai(self, http: HttpRequest) -> Response:
        """/v1/completions and /v1/chat/completions, streaming (with usage options) or not."""
        chat = http.url.path.endswith("chat/completions")
        try:
            body = await http.json()
        except ValueError:
            return _error("Invalid JSON body")
        asked = _openai_prompt(body, chat)
        if isinstance(asked, Response):
            return asked
        prompt, max_new = asked
        reply = _OpenAIReply(chat, self.state.served_model_name,
                             count_prompt_tokens(prompt) if prompt else len(body.get("prompt") or [1]))
        gen = self.sched.generate(prompt, max_new, bool(body.get("ignore_eos")))
        if not body.get("stream"):
            return JSONResponse(reply.whole(await _final(gen)))
        options = body.get("stream_options") or {}
        return StreamingResponse(reply.stream(gen, bool(options.get("include_usage")),
                                              bool(options.get("continuous_usage_stats"))),
                                 media_type="text/event-stream")


def _openai_prompt(body: dict[str, Any], chat: bool) -> tuple[str, int] | Response:
    """The prompt text and token budget of an OpenAI-style request, or the 400 answer."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error("messages must be a non-empty list")
        prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
        return prompt, int(body.get("max_completion_tokens") or body.get("max_tokens") or 2048)
    raw = body.get("prompt")
    if raw is None:
        return _error("prompt is required")
    return (raw if isinstance(raw, str) else ""), int(body.get("max_tokens") or 16)


class _OpenAIReply:
    """The shape of one OpenAI-style answer: whole, or as SSE chunks."""

    def __init__(self, chat: bool, model: str, prompt_tokens: int) -> None:
        self.chat, self.model, self.prompt_tokens = chat, model, prompt_tokens
        self.rid, self.created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        self.obj = "chat.completion" if chat else "text_completion"

    def usage(self, req: Request) -> dict[str, int]:
        """Token counts so far."""
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": len(req.pieces),
                "total_tokens": self.prompt_tokens + len(req.pieces)}

    def choice(self, delta: str, finish: str | None, first: bool) -> dict[str, Any]:
        """One streamed choice: a delta of a chat message, or text."""
        if self.chat:
            d: dict[str, Any] = {"content": delta}
            if first:
                d["role"] = "assistant"
            return {"index": 0, "delta": d, "finish_reason": finish}
        return {"index": 0, "text": delta, "logprobs": None, "finish_reason": finish}

    def whole(self, last: Request) -> dict[str, Any]:
        """The non-streaming answer."""
        text = "".join(last.pieces)
        msg = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": last.finish_reason}
               if self.chat else {"index": 0, "text": text, "logprobs": None, "finish_reason": last.finish_reason})
        return {"id": self.rid, "object": self.obj, "created": self.created, "model": self.model,
                "choices": [msg], "usage": self.usage(last)}

    async def stream(self, gen: AsyncIterator[Request], usage_at_end: bool,
                     usage_every_chunk: bool) -> AsyncIterator[bytes]:
        """The SSE chunks, usage in every chunk or in a last one as asked, then [DONE]."""
        head = {"id": self.rid, "object": self.obj + (".chunk" if self.chat else ""), "created": self.created,
                "model": self.model}
        sent, last = 0, None
        async for req in gen:
            last = req
            finish = req.finish_reason if req.finished else None
            chunk = {**head, "choices": [self.choice("".join(req.pieces[sent:]), finish, sent == 0)]}
            if usage_every_chunk:
                chunk["usage"] = self.usage(req)
            yield _sse(chunk)
            sent = len(req.pieces)
        if usage_at_end and last is not None:
            yield _sse({**head, "choices": [], "usage": self.usage(last)})
        yield b"data: [DONE]\n\n"


def build_app(state: ServerState) -> Starlette:
    """The Starlette application of one simulated server."""
    api = Endpoints(state)
    routes = [
        Route("/health", api.health), Route("/health_generate", api.health), Route("/ready", api.ready),
        Route("/model_info", api.model_info), Route("/get_model_info", api.model_info),
        Route("/server_info", api.server_info), Route("/get_server_info", api.server_info),
        Route("/v1/models", api.models), Route("/metrics", api.metrics),
        Route("/flush_cache", api.flush_cache, methods=["POST", "GET"]),
        Route("/generate", api.generate, methods=["POST"]),
        Route("/start_profile", api.start_profile, methods=["POST"]),
        Route("/stop_profile", api.stop_profile, methods=["POST"]),
        Route("/v1/completions", api.openai, methods=["POST"]),
        Route("/v1/chat/completions", api.openai, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    api_key = state.options.get("api_key")
    if api_key:
        app.add_middleware(BearerAuth, api_key=str(api_key))
    return app


class BearerAuth(BaseHTTPMiddleware):
    """--api-key as SGLang enforces it: ``Authorization: Bearer KEY`` on every path but /health*, /metrics."""

    def __init__(self, app: ASGIApp, api_key: str) -> None:
        super().__init__(app)
        self.expected = f"Bearer {api_key}"

    async def dispatch(self, request: HttpRequest, call_next: RequestResponseEndpoint) -> Response:
        """Pass the request on, or answer 401 like SGLang."""
        path = request.url.path
        if request.method == "OPTIONS" or path.startswith(("/health", "/metrics")):
            return await call_next(request)
        if request.headers.get("Authorization") != self.expected:
            return JSONResponse({"error": "Unauthorized"}, status_code=401)
        return await call_next(request)
