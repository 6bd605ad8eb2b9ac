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


def build_app(state: ServerState) -> Starlette:
    """The Starlette application of one simulated server."""
    sched = state.scheduler

    async def health(_: HttpRequest) -> Response:
        if not state.up:
            return Response(status_code=503)
        async for _req in sched.generate("", 1, True):
            pass
        return Response(status_code=200)

    async def ready(_: HttpRequest) -> Response:
        return Response(status_code=200 if state.up else 503)

    async def model_info(_: HttpRequest) -> Response:
        return JSONResponse({"model_path": state.options.get("model_path"),
                             "served_model_name": state.served_model_name,
                             "tokenizer_path": state.options.get("tokenizer_path") or
                             state.options.get("model_path"), "is_generation": True,
                             "preferred_sampling_params": None, "weight_version": "default",
                             "load_format": state.options.get("load_format"),
                             "model_type": "deepseek_v4", "architectures": ["DeepseekV4ForCausalLM"]})

    async def server_info(_: HttpRequest) -> Response:
        info = {k: v for k, v in state.options.items() if k != "sim_scenario"}
        info.update({"version": state.version, "startup_time": state.started_at, "frontend": "python",
                     "internal_states": [{"avg_spec_accept_length": sched.avg_accept_length(),
                                          "last_gen_throughput": state.outcome.tok_s_c16}],
                     "simulated": {"scenario": state.scenario.name, "time_scale": state.scenario.time_scale,
                                   "modelled_tok_s_c16": state.outcome.tok_s_c16 * state.outcome.noise_factor}})
        return JSONResponse(info)

    async def models(_: HttpRequest) -> Response:
        name = state.served_model_name
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model", "root": name,
                                                         "owned_by": "sglang", "max_model_len": 163840}]})

    async def flush_cache(_: HttpRequest) -> Response:
        sched.flush()
        return Response("Cache flushed.\nPlease check backend logs for more details.", status_code=200)

    async def generate(http: HttpRequest) -> Response:
        try:
            body = await http.json()
        except ValueError:
            return _error("Invalid JSON body")
        has_text, has_ids = body.get("text") is not None, body.get("input_ids") is not None
        if has_text == has_ids:
            return _error("Either text, input_ids or input_embeds should be provided.")
        if (has_text and not isinstance(body["text"], str)) or (has_ids and not isinstance(body["input_ids"], list)):
            return _error("The simulated engine supports one prompt per request.")
        if has_text and state.skip_tokenizer:
            return _error("text input requires a tokenizer; the server runs with --skip-tokenizer-init")
        prompt = body.get("text") or ""
        prompt_tokens = count_prompt_tokens(prompt) if has_text else len(body["input_ids"])
        params = body.get("sampling_params") or {}
        max_new = int(params.get("max_new_tokens") or 128)
        rid = body.get("rid") or uuid.uuid4().hex
        t0 = time.perf_counter()
        gen = sched.generate(prompt, max_new, bool(params.get("ignore_eos")))
        if not body.get("stream"):
            return JSONResponse(_generate_event(state, await _final(gen), prompt_tokens, rid, t0))

        async def stream() -> AsyncIterator[bytes]:
            async for req in gen:
                yield _sse(_generate_event(state, req, prompt_tokens, rid, t0))
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    async def openai(http: HttpRequest) -> Response:
        chat = http.url.path.endswith("chat/completions")
        try:
            body = await http.json()
        except ValueError:
            return _error("Invalid JSON body")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                return _error("messages must be a non-empty list")
            prompt = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
            max_new = body.get("max_completion_tokens") or body.get("max_tokens") or 2048
        else:
            raw = body.get("prompt")
            if raw is None:
                return _error("prompt is required")
            prompt = raw if isinstance(raw, str) else ""
            max_new = body.get("max_tokens") or 16
        prompt_tokens = count_prompt_tokens(prompt) if prompt else len(body.get("prompt") or [1])
        gen = sched.generate(prompt, int(max_new), bool(body.get("ignore_eos")))
        rid, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), state.served_model_name
        obj = "chat.completion" if chat else "text_completion"
        stream_options = body.get("stream_options") or {}
        usage_wanted = bool(stream_options.get("include_usage"))
        usage_every_chunk = bool(stream_options.get("continuous_usage_stats"))

        def choice(delta: str, finish: str | None, first: bool) -> dict[str, Any]:
            if chat:
                d: dict[str, Any] = {"content": delta}
                if first:
                    d["role"] = "assistant"
                return {"index": 0, "delta": d, "finish_reason": finish}
            return {"index": 0, "text": delta, "logprobs": None, "finish_reason": finish}

        def usage(req: Request) -> dict[str, int]:
            return {"prompt_tokens": prompt_tokens, "completion_tokens": len(req.pieces),
                    "total_tokens": prompt_tokens + len(req.pieces)}

        if not body.get("stream"):
            last = await _final(gen)
            text = "".join(last.pieces)
            msg = ({"index": 0, "message": {"role": "assistant", "content": text},
                    "finish_reason": last.finish_reason} if chat else
                   {"index": 0, "text": text, "logprobs": None, "finish_reason": last.finish_reason})
            return JSONResponse({"id": rid, "object": obj, "created": created, "model": model,
                                 "choices": [msg], "usage": usage(last)})

        async def stream() -> AsyncIterator[bytes]:
            sent, last = 0, None
            async for req in gen:
                last = req
                delta = "".join(req.pieces[sent:])
                finish = req.finish_reason if req.finished else None
                chunk = {"id": rid, "object": obj + (".chunk" if chat else ""), "created": created,
                         "model": model, "choices": [choice(delta, finish, sent == 0)]}
                if usage_every_chunk:
                    chunk["usage"] = usage(req)
                yield _sse(chunk)
                sent = len(req.pieces)
            if usage_wanted and last is not None:
                yield _sse({"id": rid, "object": obj + (".chunk" if chat else ""), "created": created,
                            "model": model, "choices": [], "usage": usage(last)})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    routes = [
        Route("/health", health), Route("/health_generate", health), Route("/ready", ready),
        Route("/model_info", model_info), Route("/get_model_info", model_info),
        Route("/server_info", server_info), Route("/get_server_info", server_info),
        Route("/v1/models", models), Route("/flush_cache", flush_cache, methods=["POST", "GET"]),
        Route("/generate", generate, methods=["POST"]),
        Route("/v1/completions", openai, methods=["POST"]),
        Route("/v1/chat/completions", openai, methods=["POST"]),
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
