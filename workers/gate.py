"""The correctness gate: a fast configuration that answers garbage must never win.

Before the benchmark every gate prompt is sent greedily (temperature 0) to ``/generate`` and
checked: garbage is detected even without expectations (empty output, one token repeated,
Unicode replacement characters); then ``expect`` (substring) or ``expect_regex`` (regex search)
must match. With dummy weights (``--load-format dummy``) the text is meaningless, so only
"tokens came back" is checked and the result says the semantic checks were skipped.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from core.types import GateCheck, GateConfig, GatePrompt, GateResult
from workers.bench import auth_headers
from workers.replies import body_summary

DEFAULT_PROMPT = GatePrompt(text="The capital of France is", max_new_tokens=16)
REPEAT_MIN_TOKENS = 4


def garbage_reason(text: str | None, output_ids: list[int]) -> str | None:
    """Why an output looks like garbage (NaN weights, broken kernels), or None if it looks sane."""
    if not output_ids and not text:
        return "empty output"
    if len(output_ids) >= REPEAT_MIN_TOKENS and len(set(output_ids)) == 1:
        return f"one token repeated {len(output_ids)} times"
    if text is not None:
        if "\ufffd" in text:
            return "replacement characters in output"
        if not text.strip():
            return "only whitespace"
    return None


def check_output(prompt: GatePrompt, text: str | None, output_ids: list[int], dummy_weights: bool) -> GateCheck:
    """Judge one answer."""
    got = text if text is not None else " ".join(map(str, output_ids[:32]))
    expected = prompt.expect or prompt.expect_regex
    if dummy_weights:
        ok = bool(output_ids or text)
        return GateCheck(prompt.text, got, expected, ok, "tokens returned" if ok else "empty output")
    reason = garbage_reason(text, output_ids)
    if reason:
        return GateCheck(prompt.text, got, expected, False, reason)
    if prompt.expect is not None and prompt.expect not in (text or ""):
        return GateCheck(prompt.text, got, expected, False, "expected text missing")
    if prompt.expect_regex is not None and not re.search(prompt.expect_regex, text or ""):
        return GateCheck(prompt.text, got, expected, False, "expected pattern missing")
    return GateCheck(prompt.text, got, expected, True, "ok")


class _BadReply(Exception):
    """A /generate answer the gate cannot read (its message is the one-line reason)."""


def _reply(resp: httpx.Response) -> tuple[str | None, list[int]]:
    """(text, output_ids) of a /generate answer; _BadReply saying what is wrong with it otherwise."""
    if resp.status_code != 200:
        raise _BadReply(f"HTTP {resp.status_code}: {body_summary(resp.text)}")
    try:
        data = resp.json()
    except ValueError:
        raise _BadReply(f"not JSON: {body_summary(resp.text, 80)}") from None
    text = data.get("text") if isinstance(data, dict) else None
    ids = (data.get("output_ids") or []) if isinstance(data, dict) else None
    if not isinstance(data, dict) or not isinstance(text, str | None) or not isinstance(ids, list) \
            or not all(isinstance(i, int) for i in ids):
        raise _BadReply(f"unexpected reply: {body_summary(resp.text, 80)}")
    return text, ids


async def run_gate(url: str, gate: GateConfig, *, dummy_weights: bool = False, no_tokenizer: bool = False,
                   transport: httpx.AsyncBaseTransport | None = None, timeout_s: float = 120.0,
                   api_key: str | None = None) -> GateResult:
    """Send each gate prompt (or a default one) and check the answers; never raises for HTTP trouble.

    ``api_key``: the server's ``--api-key``, sent as ``Authorization: Bearer``.

    ``no_tokenizer`` (``--skip-tokenizer-init``): prompts go as token ids and only the garbage
    checks on ``output_ids`` apply (there is no text to compare).
    """
    prompts = gate.prompts or (DEFAULT_PROMPT,)
    checks: list[GateCheck] = []
    async with httpx.AsyncClient(base_url=url, transport=transport, timeout=timeout_s,
                                 headers=auth_headers(api_key)) as client:
        for prompt in prompts:
            body: dict[str, Any] = {"sampling_params": {"max_new_tokens": prompt.max_new_tokens,
                                                        "temperature": 0.0}}
            if no_tokenizer:
                body["input_ids"] = [ord(c) % 30000 + 100 for c in prompt.text]
                prompt = GatePrompt(text=prompt.text, max_new_tokens=prompt.max_new_tokens)
            else:
                body["text"] = prompt.text
            try:
                resp = await client.post("/generate", json=body)
                text, ids = _reply(resp)
                checks.append(check_output(prompt, text, ids, dummy_weights))
            except _BadReply as exc:
                checks.append(GateCheck(prompt.text, "", prompt.expect or prompt.expect_regex, False,
                                        f"request failed: {exc}"))
            except httpx.HTTPError as exc:
                checks.append(GateCheck(prompt.text, "", prompt.expect or prompt.expect_regex, False,
                                        f"request failed: {type(exc).__name__}: {body_summary(str(exc), 120)}"))
    return GateResult(passed=all(c.ok for c in checks), checks=tuple(checks),
                      semantic_skipped=dummy_weights or no_tokenizer)
