"""What cannot run where: a small table of SGLang settings gated on the GPU architecture.

Sources: SGLang 0.5.23 code (reference §2.2) and what SGLang 0.5.17 refused on a real H200. A rule
holds for the SGLang versions in ``[since, until)`` (either open); a sweep applies the rules of the
version its nodes run, and ``validate``/``render`` those of ``--sglang-version``. ``tuner validate
--gpu sm_120`` and the sweep drop choices that break a rule before any launch and list them.
Architectures are ``sm_<major><minor>`` (sm_90 Hopper, sm_100/sm_103 B200/B300, sm_120 RTX PRO 6000 / RTX 50xx).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HardwareRule:
    """``dest`` set to any of ``values`` runs only on the architectures in ``archs`` (in SGLang
    versions ``since`` <= v < ``until``; None: unbounded)."""

    dest: str
    values: tuple[str, ...]
    archs: tuple[str, ...]
    reason: str
    since: str | None = None
    until: str | None = None

    def holds_for(self, version: str | None) -> bool:
        """Does the rule hold for this SGLang version (None or unparsable: the newest)?"""
        v = version_tuple(version)
        if v is None:
            return self.until is None
        return (self.since is None or v >= (version_tuple(self.since) or ())) and (
            self.until is None or v < (version_tuple(self.until) or ()))


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """'0.5.17' -> (0, 5, 17); 'v0.5.23rc1' -> (0, 5, 23); None when there are no digits."""
    if not version:
        return None
    parts = re.findall(r"\d+", version.split("+")[0])[:3]
    return tuple(int(p) for p in parts) if parts else None


SM100 = ("sm_100", "sm_103")
RULES: tuple[HardwareRule, ...] = (
    HardwareRule("moe_runner_backend", ("flashinfer_trtllm", "flashinfer_trtllm_routed",
                                        "experimental_sgl_trtllm"),
                 SM100, "trtllm-gen MoE kernels are SM100-only"),
    HardwareRule("moe_runner_backend", ("hpc_ops",), ("sm_90",), "the hpc_ops MoE runner needs SM90"),
    HardwareRule("moe_a2a_backend", ("flashinfer_megamoe",), SM100, "FlashInfer MegaMoE needs SM100"),
    HardwareRule("quantization", ("nvfp4_online",), SM100, "nvfp4_online is supported only on SM100/SM103"),
    HardwareRule("quantization", ("mxfp8",), SM100, "MXFP8 MoE quantization needs SM100"),
    HardwareRule("attention_backend", ("fa3",), ("sm_80", "sm_86", "sm_89", "sm_90"),
                 "FlashAttention v3 needs SM80-SM90"),
    HardwareRule("attention_backend", ("hpc_ops",), ("sm_90",), "hpc_ops attention needs SM90"),
    HardwareRule("attention_backend", ("cutedsl_mla",), SM100, "cutedsl_mla is SM100-only"),
    HardwareRule("attention_backend", ("trtllm_mha",), ("sm_90", *SM100, "sm_120", "sm_121"),
                 "trtllm_mha needs SM90, SM100 or SM120", since="0.5.23"),
    HardwareRule("attention_backend", ("trtllm_mha",), (*SM100, "sm_120", "sm_121"),  # seen refused on an H200
                 "trtllm_mha is only supported on Blackwell GPUs before SGLang 0.5.23", until="0.5.23"),
    HardwareRule("kv_cache_dtype", ("mxfp8",), (*SM100, "sm_110", "sm_120", "sm_121"),
                 "an MXFP8 KV cache needs SM100+"),
    HardwareRule("kv_cache_dtype", ("nvfp4",), (*SM100, "sm_120", "sm_121"),
                 "an NVFP4 KV cache needs SM100 or SM120"),
)


@dataclass(frozen=True)
class Pruned:
    """A choice dropped for the target GPU, with the reason."""

    param: str
    choice: Any
    reason: str


def violated_rule(flags: dict[str, Any], arch: str, version: str | None = None) -> str | None:
    """The reason the first rule (of SGLang ``version``) broken by ``flags`` on ``arch`` gives, or None."""
    for rule in RULES:
        if not rule.holds_for(version):
            continue
        value = flags.get(rule.dest)
        if value is not None and str(value) in rule.values and arch not in rule.archs:
            return f"{rule.dest}={value}: {rule.reason}"
    return None


def arch_from_capability(capability: str) -> str:
    """'12.0' (nvidia-smi compute_cap) -> 'sm_120'."""
    major, _, minor = capability.strip().partition(".")
    return f"sm_{int(major)}{int(minor or 0)}"
