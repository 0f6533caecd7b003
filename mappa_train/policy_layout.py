"""How a run's policies sit on models (`model.policies`), read in one place: `policy_layout(cfg)`.

    shared     one whole model acts for every role                      FullModels(shared=True)
    per_role   one whole model per role (the paper; model.role_paths)   FullModels(shared=False)
    lora       one frozen base, one adapter per role or lora.groups     mappa_train.lora.LoraLayout

Everything the trainer does differently per layout is a question to a `PolicyLayout`: which policy
acts for a role, where each starts, how many engines and adapters it takes (placement), how its
generators and learners are built, whether fresh ones need a weight sync, what final/ holds beside
final/<policy>/, and how a checkpoint's policy folder becomes a Hugging Face model (`mappa export`).
The checkpoint and export layout on disk is the same for all: checkpoints/step_N/<policy>/, final/<policy>/.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from mappa_train.config import ConfigError, TrainConfig

TINY_DIR = "tiny_model"  # model.path=tiny is built inside out_dir, possibly before train() starts

SHARED = "shared"  # the one policy's name in a shared run (final/shared/)


@runtime_checkable
class PolicyLayout(Protocol):
    starts_in_sync: bool  # fresh learners and generators hold the same weights (no sync before step 1)
    unused_settings: tuple[str, ...]  # config key prefixes this layout never reads (a resume ignores them)

    def policy_of(self, roles: Sequence[str]) -> dict[str, str]:
        """role -> policy name; a ConfigError for settings that name roles the env lacks."""

    def starts(self, names: Iterable[str], model_path: Path | str) -> dict[str, Path]:
        """policy -> the checkpoint it starts from (its config and tokenizer)."""

    def engines(self, names: Sequence[str]) -> int:
        """Generator engines one process holds for these policies (they split vLLM's memory share)."""

    def adapters(self, names: Sequence[str]) -> int:
        """Trainable adapters on the one learner of these policies; 0: each policy is a whole model."""

    def make_generators(self, model_path: Path | str, names: Sequence[str], **kwargs) -> dict[str, Any]:
        """policy -> its Generator; `kwargs` go to each engine (dtype, vLLM's memory share, ...)."""

    def make_learners(self, model_path: Path | str, names: Sequence[str]) -> dict[str, Any]:
        """policy -> its `learner.Learner`."""

    def finish(self, final_dir: Path, model_path: Path | str, policy_of: Mapping[str, str]) -> None:
        """Write what final/ holds beside final/<policy>/ (after those are written)."""

    def export_policy(self, name: str, ckpt_dir: Path, model_path: Path | str, target: Path) -> Path:
        """Write checkpoint folder `ckpt_dir` of policy `name` as a Hugging Face model folder `target`."""


def policy_layout(cfg: TrainConfig, policies: str | None = None) -> PolicyLayout:
    """The layout of `cfg` (or of another run's `policies` value, which a resume compares with)."""
    policies = cfg.model.policies if policies is None else policies
    if policies == "lora":
        from mappa_train.lora import LoraLayout

        return LoraLayout(cfg)
    return FullModels(cfg, shared=policies == "shared")


def pad_id(model_path: Path | str) -> int:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path).pad_token_id or 0


@dataclass(frozen=True)
class FullModels:
    """Each policy a whole model, with its own engine, learner and frozen reference copy."""

    cfg: TrainConfig
    shared: bool  # one policy for every role, else one per role
    starts_in_sync = True
    unused_settings = ("lora.",)

    def policy_of(self, roles: Sequence[str]) -> dict[str, str]:
        unknown = sorted(set(self.cfg.model.role_paths) - set(roles))
        if unknown:
            raise ConfigError(f"model.role_paths names roles {unknown} that {self.cfg.env.id} does not have; "
                              f"its roles: {list(roles)}")
        return {r: SHARED if self.shared else r for r in roles}

    def starts(self, names: Iterable[str], model_path: Path | str) -> dict[str, Path]:
        """`model.role_paths` for the roles it names (per_role: a policy is a role), else `model_path`."""
        from mappa_train.model_source import resolve_model

        cfg, paths = self.cfg, self.cfg.model.role_paths
        return {n: resolve_model(paths[n], tiny_dir=Path(cfg.out_dir) / TINY_DIR, seed=cfg.seed) if n in paths
                else Path(model_path) for n in names}

    def engines(self, names: Sequence[str]) -> int:
        return len(names)

    def adapters(self, names: Sequence[str]) -> int:
        return 0

    def make_generators(self, model_path: Path | str, names: Sequence[str], **kwargs) -> dict[str, Any]:
        from mappa_train.generation import make_generator

        paths = self.starts(names, model_path)
        return {n: make_generator(self.cfg.generation.backend, str(paths[n]), **kwargs) for n in names}

    def make_learners(self, model_path: Path | str, names: Sequence[str]) -> dict[str, Any]:
        from mappa_train.learner import build_learner

        paths = self.starts(names, model_path)
        return {n: build_learner(self.cfg, paths[n], pad_id(paths[n])) for n in names}

    def finish(self, final_dir: Path, model_path: Path | str, policy_of: Mapping[str, str]) -> None:
        return None  # final/<policy>/ is the whole model

    def export_policy(self, name: str, ckpt_dir: Path, model_path: Path | str, target: Path) -> Path:
        """DeepSpeed's weights put into a model built from the policy's starting config, with its tokenizer."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        start = self.starts([name], model_path)[name]
        state = _deepspeed_weights(ckpt_dir)
        config = AutoConfig.from_pretrained(start)
        model = AutoModelForCausalLM.from_config(config, dtype=next(iter(state.values())).dtype)
        missing, unexpected = model.load_state_dict(state, strict=False)
        tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
        if set(missing) - tied or unexpected:
            raise ConfigError(f"{ckpt_dir} does not fit the model of {start}: missing "
                              f"{sorted(set(missing) - tied)[:3]}, unexpected {sorted(unexpected)[:3]}")
        model.tie_weights()
        with torch.no_grad():
            model.save_pretrained(target)
        AutoTokenizer.from_pretrained(start).save_pretrained(target)
        return target


def _deepspeed_weights(ckpt: Path) -> dict:
    """The model weights of a DeepSpeed checkpoint folder (tag "state"), full even under ZeRO-3."""
    import torch

    files = sorted((ckpt / "state").glob("mp_rank_*_model_states.pt"))
    if not files:
        raise ConfigError(f"{ckpt} holds no DeepSpeed model state (state/mp_rank_00_model_states.pt)")
    module = torch.load(files[0], map_location="cpu", weights_only=False).get("module") or {}
    if module:
        return dict(module)
    # ZeRO-3 keeps no weights in the model file: gather them from the partitions
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return dict(get_fp32_state_dict_from_zero_checkpoint(str(ckpt), tag="state"))
