"""Which floating-point precision a run computes in, decided here and nowhere else.

`model.dtype` is "auto" (the default), "bfloat16" or "float32". "auto" resolves, in the process
that builds the learner or generator, to bfloat16 where the hardware multiplies bf16 matrices fast
(a GPU with bf16 support; a CPU with AMX or AVX512-BF16, e.g. Intel Sapphire Rapids and later,
AMD Zen 4 and later) and to float32 elsewhere: a CPU without those units emulates bf16 and runs
slower than in float32.

What runs in the resolved dtype: the generators (HF and vLLM hold bf16 weights), the learner's
forward and backward and the frozen reference model. The optimizer keeps float32 weights and Adam
moments (on CPU the learner autocasts over fp32 weights; on GPU DeepSpeed's bf16 mode keeps fp32
master copies), and log-probs are taken in float32 from the bf16 logits (mappa_train.learner).
docs/performance.md has the measured speeds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

DtypeSetting = Literal["auto", "bfloat16", "float32"]
DTYPE_SETTINGS: tuple[str, ...] = get_args(DtypeSetting)


@dataclass(frozen=True)
class Precision:
    """The resolved compute dtype and why it was chosen."""

    dtype: Literal["bfloat16", "float32"]
    reason: str

    @property
    def torch_dtype(self):
        import torch

        return torch.bfloat16 if self.dtype == "bfloat16" else torch.float32

    def describe(self) -> str:
        """The one start-up line: what runs in which precision, and why."""
        if self.dtype == "float32":
            return f"precision: float32 everywhere ({self.reason})"
        return (f"precision: bfloat16 matmuls in generation, learner and reference; float32 master weights, "
                f"optimizer state and log-probs ({self.reason})")


def bf16_units() -> list[str]:
    """The bf16 matrix hardware of this process's device: ["cuda"] on a bf16-capable GPU, the CPU's
    AMX / AVX512-BF16 otherwise (empty: none)."""
    import torch

    if torch.cuda.is_available():
        return ["cuda"] if torch.cuda.is_bf16_supported() else []
    probes = {"AMX": "_is_amx_tile_supported", "AVX512-BF16": "_is_avx512_bf16_supported"}
    return [unit for unit, probe in probes.items() if getattr(torch.cpu, probe, lambda: False)()]


def resolve_precision(setting: str) -> Precision:
    """`model.dtype` as this process computes it ("auto" asks the hardware: `bf16_units`)."""
    if setting not in DTYPE_SETTINGS:
        raise ValueError(f"model.dtype must be one of {', '.join(DTYPE_SETTINGS)}, got {setting!r}")
    if setting != "auto":
        return Precision(setting, f"model.dtype={setting}")  # type: ignore[arg-type]
    units = bf16_units()
    if units == ["cuda"]:
        return Precision("bfloat16", "model.dtype=auto: this GPU supports bf16")
    if units:
        return Precision("bfloat16", f"model.dtype=auto: this CPU has {' and '.join(units)}")
    import torch

    where = "this GPU lacks bf16" if torch.cuda.is_available() else "this CPU has neither AMX nor AVX512-BF16"
    return Precision("float32", f"model.dtype=auto: {where}, so bf16 would be emulated and slower")
