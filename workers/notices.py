"""Why a configuration is as fast as it is, in SGLang's own words: the warnings and auto-adjustments a
server prints while it starts, each with what to do about it.

SGLang adjusts settings silently or with one warning line: an untuned fused-MoE kernel config, CUDA
graphs switched off, ``max_running_requests`` capped under speculative decoding, an EP size forced to
the TP size, draft tokens forced to steps + 1, a fallback kernel. A sweep that only ranks tok/s hides
these; ``notices_in`` finds them in a server log (the stored one), once per kind, first line kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Notice:
    """One thing SGLang said about a configuration: ``kind``, the log ``line``, and the ``fix``."""

    kind: str
    line: str
    fix: str

    def describe(self) -> str:
        """``kind: fix``, for one line of a listing."""
        return f"{self.kind}: {self.fix}"


CATALOGUE: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("untuned MoE kernel", re.compile(r"Using default MoE kernel config", re.I),
     "the fused-MoE Triton kernel runs a default config for this GPU and shape; tune it with SGLang's "
     "benchmark/kernels/fused_moe_triton/tuning_fused_moe_triton.py and put the JSON where the line says"),
    ("CUDA graphs off", re.compile(r"cuda graph (?:is )?disabled|disabl(?:e|ing) (?:prefill |decode )?cuda graph",
                                   re.I),
     "CUDA graphs are off for a phase (decode without them is much slower at small batches); the line names "
     "the setting that turned them off"),
    ("decode without CUDA graph", re.compile(r"Decode batch\b.*\bcuda graph: False"),
     "some decode batches ran eagerly (batch larger than cuda_graph_max_bs, or graphs off); set "
     "cuda_graph_max_bs to at least the benchmark's concurrency"),
    ("max_running_requests capped", re.compile(r"max[ _]running[ _]requests\b.*\b(?:set|reset|adjust|cap|lower)",
                                               re.I),
     "speculative decoding capped the running requests; pass --max-running-requests explicitly (at least "
     "the benchmark's concurrency)"),
    ("EP size overridden", re.compile(r"expert parallel size is adjusted", re.I),
     "this all-to-all backend forces ep_size = tp_size, so ep_size has no effect with it; do not search it"),
    ("draft tokens overridden", re.compile(r"num_draft_tokens\b.*\b(?:adjust|set to|override)", re.I),
     "with topk 1 SGLang sets num_draft_tokens = steps + 1; searching other values is wasted launches"),
    ("attention backend replaced", re.compile(r"Setting attention backend to \w+", re.I),
     "SGLang runs another attention backend than asked (fa3 takes only an fp8_e4m3 FP8 KV cache); the asked "
     "one has no effect with these settings: pair the backend and KV-cache dtype the line names"),
    ("chunked prefill resized", re.compile(r"chunked prefill size is adjusted", re.I),
     "DP attention divides chunked_prefill_size by the DP size; raise it if prefill got slower"),
    ("fallback kernel", re.compile(r"\b(?:fall(?:ing|s)?\s?back|fallback)\b.*\b(?:kernel|marlin|triton|gemm|"
                                   r"cutlass|moe)|\b(?:kernel|gemm|moe)\b.*\bfall(?:ing|s)?\s?back\b", re.I),
     "a fallback kernel runs instead of the fast path; check the MoE runner and quantization pair for "
     "this GPU"),
    ("deprecated option", re.compile(r"\bis deprecated\b|\bdeprecated\b.*\buse\b", re.I),
     "an option SGLang will remove; the line names its replacement"),
)
MAX_LINE = 300
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # SGLang colours its deprecation warnings


def notices_in(log: str) -> tuple[Notice, ...]:
    """The catalogue's notices found in ``log``, in catalogue order, each with its first line."""
    lines = ANSI.sub("", log).splitlines()
    found = []
    for kind, pattern, fix in CATALOGUE:
        line = next((ln for ln in lines if pattern.search(ln)), None)
        if line is not None:
            found.append(Notice(kind, line.strip()[:MAX_LINE], fix))
    return tuple(found)
