"""LoRA policies (`model.policies=lora`): one frozen base model, one peft adapter per role or group.

`LoraLayout` is the run's `policy_layout.PolicyLayout`: the trainer asks it what to build and write
instead of reading `model.policies` (config/validation.py checks the `lora` section). Its parts:

    role -> adapter:   adapter_map(cfg, roles)                 # groups share one; ConfigError on unknown names
    learner:           one PolicyLearner(adapters=LoraAdapters(...)) holds the base and every adapter;
                       `AdapterLearner` is one adapter's view of it, a `learner.Learner` like any policy's
    generator:         one HFGenerator (or one vLLM engine, `vllm_engine.LoraVLLMGenerator`) holds the base
                       and every adapter; `AdapterGenerator` is one adapter's view, switched per batch
    sync:              `AdapterLearner.state_dict()` is the adapter's tensors only (KB-MB, not the model)
    final/:            final/<adapter>/ (peft folders), final/lora.json (base + role -> adapter), final/merged/
    export:            a checkpoint's adapter merged into the base (`merge_adapter`)

The KL reference is the base with the adapters switched off (peft's `disable_adapter`): no second copy.
Each adapter has its own AdamW state: only the adapter being trained requires grad while it trains,
so DeepSpeed and AdamW leave the others' weights and moments exactly as they were.
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mappa_envs.seeding import name_key, stride_seed
from mappa_train.config import ConfigError

if TYPE_CHECKING:
    from mappa_train.config import LoraConfig, TrainConfig
    from mappa_train.learner import PolicyLearner

ADAPTER_FILE, OPTIMIZER_FILE, MANIFEST = "adapter_model.safetensors", "optimizer.pt", "lora.json"


def adapter_map(cfg: TrainConfig, roles: Sequence[str]) -> dict[str, str]:
    """role -> adapter name: the role's group, else the role itself. Names the env lacks are a ConfigError."""
    lora = cfg.lora
    unknown = sorted({r for members in lora.groups.values() for r in members} - set(roles))
    if unknown:
        raise ConfigError(f"lora.groups names roles {unknown} that {cfg.env.id} does not have; "
                          f"its roles: {list(roles)}")
    clash = sorted(g for g, members in lora.groups.items() if g in roles and g not in members)
    if clash:
        raise ConfigError(f"lora.groups names groups {clash} after roles outside them; rename the groups")
    of = {r: next((g for g, members in lora.groups.items() if r in members), r) for r in roles}
    names = set(of.values())
    for key, given in (("lora.lr", lora.lr), ("lora.frozen", lora.frozen)):
        if set(given) - names:
            raise ConfigError(f"{key} names {sorted(set(given) - names)}, which are no adapter; "
                              f"the adapters are {sorted(names)} (roles, or lora.groups names)")
    if names <= set(lora.frozen):
        raise ConfigError(f"lora.frozen freezes every adapter ({sorted(names)}): nothing would train")
    return of


def _peft():
    from mappa_train.generation import require

    return require("peft", "'mappa[train]'")


def peft_config(lora: LoraConfig):
    return _peft().LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                              target_modules=list(lora.target_modules), bias="none")


def check_targets(model, target_modules: Sequence[str]) -> None:
    """Every target names a linear layer of `model` (peft matches the last part of a module's name)."""
    import torch

    linear = sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    unknown = [t for t in target_modules if t not in linear]
    if unknown:
        raise ConfigError(f"lora.target_modules {unknown} are not linear layers of {model.name_or_path}; "
                          f"it has {', '.join(linear)}")


def add_adapters(model, lora: LoraConfig, names: Sequence[str]):
    """`model` wrapped by peft with one fresh adapter per name (B = 0: each starts as the base)."""
    check_targets(model, lora.target_modules)
    names = list(names)
    config = peft_config(lora)
    model = _peft().get_peft_model(model, config, adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, config)
    return model


def adapter_parameters(model, name: str) -> list:
    """The adapter's parameters in a fixed order (peft names them `...lora_A.<name>.weight`)."""
    pattern = re.compile(rf"\.lora_\w+\.{re.escape(name)}(\.|$)")
    return [p for n, p in model.named_parameters() if pattern.search(n)]


def adapter_state(model, name: str) -> dict:
    """The adapter's tensors on CPU, in peft's saved-adapter naming (no adapter name in the keys)."""
    state = _peft().get_peft_model_state_dict(model, adapter_name=name)
    return {k: v.detach().cpu().clone() for k, v in state.items()}


def load_adapter_state(model, name: str, tensors: Mapping[str, Any]) -> None:
    result = _peft().set_peft_model_state_dict(model, dict(tensors), adapter_name=name)
    if result.unexpected_keys:
        raise KeyError(f"adapter {name!r}: tensors {sorted(result.unexpected_keys)[:3]} match no adapter weight")


def save_adapter(model, name: str, out_dir: str | Path) -> None:
    """peft's on-disk format (adapter_config.json + adapter_model.safetensors): vLLM and peft load it."""
    from safetensors.torch import save_file

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.peft_config[name].save_pretrained(str(out))
    save_file({k: v.contiguous() for k, v in adapter_state(model, name).items()}, str(out / ADAPTER_FILE))


def read_adapter(folder: str | Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(Path(folder) / ADAPTER_FILE))


class LoraAdapters:
    """`learner.Adapters` for LoRA: one peft adapter per name over the base; those in `lora.frozen`
    never require grad, so the optimizer holds every trained adapter and `AdapterLearner` picks one."""

    def __init__(self, lora: LoraConfig, names: Sequence[str]):
        self.lora, self.names = lora, list(names)

    def attach(self, model):
        model = add_adapters(model, self.lora, self.names)
        for name in self.names:
            for p in adapter_parameters(model, name):
                p.requires_grad_(name not in self.lora.frozen)
        return model

    def base_only(self, model):
        return model.disable_adapter()  # peft: the base with every adapter off


class AdapterLearner:
    """One adapter of a LoRA `PolicyLearner`, a `learner.Learner` like any policy's.

    Each update draws its dropout masks from its own seed (seed, adapter, update count; the count is
    checkpointed), so a resumed run repeats them exactly, with `lora.dropout` > 0 too."""

    def __init__(self, learner: PolicyLearner, name: str, lr: float | None = None, frozen: bool = False,
                 seed: int = 0):
        self.learner, self.name, self.lr, self.frozen = learner, name, lr, frozen
        self.rank = learner.rank
        self.seed, self.updates = stride_seed(seed, name_key(name)), 0

    @property
    def model(self):
        return self.learner.engine.module  # the PeftModel

    def _use(self) -> None:
        self.model.set_adapter(self.name, inference_mode=self.frozen)

    def logprobs(self, samples, reference: bool = False):
        self._use()
        return self.learner.logprobs(samples, reference=reference)

    def train(self, samples, lr: float) -> dict[str, float]:
        """PPO-clip on this adapter alone; `lr` (the schedule's, for learner.lr) scales to lora.lr's override."""
        import torch

        if self.frozen:
            return {"tokens": 0.0}
        self._use()
        self.updates += 1
        devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed((self.seed + self.updates) % 2**63)
            return self.learner.train(samples, lr if self.lr is None else lr * self.lr / self.learner.cfg.lr)

    def state_dict(self) -> dict:
        return adapter_state(self.model, self.name)

    def save_pretrained(self, out_dir: str | Path) -> None:
        if self.rank == 0:
            save_adapter(self.model, self.name, out_dir)

    def save_checkpoint(self, ckpt_dir: str | Path) -> None:
        """The adapter, its AdamW moments and update count: all a resume needs (the base never changes)."""
        import torch

        self.save_pretrained(ckpt_dir)
        optimizer = self.learner.engine.optimizer
        moments = [optimizer.state.get(p, {}) for p in adapter_parameters(self.model, self.name)]
        if self.rank == 0:
            torch.save({"moments": moments, "updates": self.updates}, Path(ckpt_dir) / OPTIMIZER_FILE)

    def load_checkpoint(self, ckpt_dir: str | Path) -> None:
        import torch

        folder = Path(ckpt_dir)
        if not (folder / ADAPTER_FILE).is_file():
            raise FileNotFoundError(f"no adapter checkpoint under {folder}")
        load_adapter_state(self.model, self.name, read_adapter(folder))
        optimizer = self.learner.engine.optimizer
        saved = torch.load(folder / OPTIMIZER_FILE, weights_only=True)
        self.updates = saved["updates"]
        for p, state in zip(adapter_parameters(self.model, self.name), saved["moments"], strict=True):
            if state:
                optimizer.state[p] = state


def lora_learners(cfg: TrainConfig, model_path: str | Path, names: Sequence[str],
                  pad_id: int) -> dict[str, AdapterLearner]:
    """One PolicyLearner over the frozen base with every adapter, and one AdapterLearner per adapter."""
    from mappa_train.learner import build_learner

    learner = build_learner(cfg, model_path, pad_id, LoraAdapters(cfg.lora, names))
    lrs = {n: float(lr) for n, lr in cfg.lora.lr.items()}  # YAML may hand 1e-4 over as a string (validated)
    return {n: AdapterLearner(learner, n, lrs.get(n), n in cfg.lora.frozen, cfg.seed) for n in names}


class AdapterGenerator:
    """One adapter of an HFGenerator whose model holds every adapter: it switches to its adapter
    before each batch, and `load_weights` takes that adapter's tensors only."""

    def __init__(self, generator, name: str):
        self.generator, self.name = generator, name
        self.tokenizer = generator.tokenizer

    def generate(self, prompts, params):
        self.generator.model.set_adapter(self.name, inference_mode=True)
        return self.generator.generate(prompts, params)

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        load_adapter_state(self.generator.model, self.name, dict(named_tensors))


def lora_generators(cfg: TrainConfig, model_path: str | Path, names: Sequence[str], **kwargs) -> dict[str, Any]:
    """One engine over the base with every adapter, viewed per adapter: HF switches adapters per batch,
    vLLM tags each request with its adapter (multi-LoRA)."""
    if cfg.generation.backend == "vllm":
        from mappa_train.generation.vllm_engine import LoraVLLMGenerator

        engine = LoraVLLMGenerator(str(model_path), cfg.lora.rank, names, peft_config=peft_config(cfg.lora), **kwargs)
        return {n: engine.view(n) for n in names}
    from transformers import AutoModelForCausalLM

    from mappa_train.generation.hf import HFGenerator

    dtype = kwargs.get("dtype")
    if isinstance(dtype, str):  # a model.dtype setting ("auto": mappa_train.precision)
        from mappa_train.precision import resolve_precision

        dtype = resolve_precision(dtype).torch_dtype
    base = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    model = add_adapters(base, cfg.lora, names).eval()
    generator = HFGenerator(model, tokenizer=_tokenizer(model_path))
    generator.model.to(generator.device)
    return {n: AdapterGenerator(generator, n) for n in names}


def _tokenizer(model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_path)


class LoraLayout:
    """`policy_layout.PolicyLayout` of `model.policies=lora`: one engine and one learner over the base hold
    every adapter; a policy is an adapter."""

    starts_in_sync = False  # fresh adapters are random (A; B = 0), drawn apart in the learner and the generator
    unused_settings = ()

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg

    def policy_of(self, roles: Sequence[str]) -> dict[str, str]:
        return adapter_map(self.cfg, roles)

    def starts(self, names: Iterable[str], model_path: str | Path) -> dict[str, Path]:
        return {n: Path(model_path) for n in names}

    def engines(self, names: Sequence[str]) -> int:
        return 1  # every adapter in one engine: the memory of one policy, not len(names)

    def adapters(self, names: Sequence[str]) -> int:
        return len(names)

    def make_generators(self, model_path: str | Path, names: Sequence[str], **kwargs) -> dict[str, Any]:
        return lora_generators(self.cfg, model_path, names, **kwargs)

    def make_learners(self, model_path: str | Path, names: Sequence[str]) -> dict[str, AdapterLearner]:
        return lora_learners(self.cfg, model_path, names, _tokenizer(model_path).pad_token_id or 0)

    def finish(self, final_dir: Path, model_path: str | Path, policy_of: Mapping[str, str]) -> None:
        write_manifest(final_dir, Path(model_path).resolve(), policy_of)
        if self.cfg.lora.export_merged:
            export_merged(final_dir, Path(final_dir) / "merged")

    def export_policy(self, name: str, ckpt_dir: Path, model_path: str | Path, target: Path) -> Path:
        if not (ckpt_dir / ADAPTER_FILE).is_file():
            raise ConfigError(f"{ckpt_dir} holds no LoRA adapter ({ADAPTER_FILE}); was the checkpoint cut short?")
        return merge_adapter(model_path, ckpt_dir, target)


# ---- finished runs: final/<adapter>/ + final/lora.json -----------------------------------------------

def write_manifest(final_dir: str | Path, base: str | Path, role_adapter: Mapping[str, str]) -> None:
    """What `mappa eval --team run:DIR` needs to rebuild the team: the base and each role's adapter."""
    Path(final_dir, MANIFEST).write_text(json.dumps({"base": str(base), "roles": dict(role_adapter)}, indent=2))


def read_manifest(final_dir: str | Path) -> dict | None:
    path = Path(final_dir, MANIFEST)
    return json.loads(path.read_text()) if path.is_file() else None


def load_run_generators(final_dir: str | Path, backend: str = "hf", **kwargs) -> dict[str, Any]:
    """role -> a generator over the run's base with that role's trained adapter (one engine for all)."""
    from transformers import AutoModelForCausalLM

    manifest = read_manifest(final_dir)
    final = Path(final_dir)
    adapters = sorted(set(manifest["roles"].values()))
    if backend == "vllm":
        from mappa_train.generation.vllm_engine import LoraVLLMGenerator

        engine = LoraVLLMGenerator.from_folders(manifest["base"], {a: final / a for a in adapters}, **kwargs)
        return {role: engine.view(a) for role, a in manifest["roles"].items()}
    if backend != "hf":
        raise ConfigError(f"a LoRA run is served by the hf or vllm backend, not {backend!r}")
    import torch

    from mappa_train.generation.hf import HFGenerator

    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32  # as HFGenerator loads a path
    base = AutoModelForCausalLM.from_pretrained(manifest["base"], dtype=dtype)
    model = _peft().PeftModel.from_pretrained(base, str(final / adapters[0]), adapter_name=adapters[0])
    for a in adapters[1:]:
        model.load_adapter(str(final / a), adapter_name=a)
    generator = HFGenerator(model.eval(), tokenizer=_tokenizer(manifest["base"]))
    generator.model.to(generator.device)
    return {role: AdapterGenerator(generator, a) for role, a in manifest["roles"].items()}


def export_merged(final_dir: str | Path, out_dir: str | Path) -> list[Path]:
    """Write out_dir/<role>/: the base with the role's adapter merged in, a plain transformers model
    (any tool that reads a HF folder serves it). Returns the folders written."""
    manifest = read_manifest(final_dir)
    if manifest is None:
        raise FileNotFoundError(f"{Path(final_dir) / MANIFEST} does not exist: {final_dir} is not a LoRA run's final/")
    tokenizer = _tokenizer(manifest["base"])
    return [merge_adapter(manifest["base"], Path(final_dir) / adapter, Path(out_dir) / role, tokenizer)
            for role, adapter in sorted(manifest["roles"].items())]


def merge_adapter(base: str | Path, adapter_dir: str | Path, target: str | Path, tokenizer=None) -> Path:
    """Write `target`/: the model at `base` with the peft adapter in `adapter_dir` merged in, and the
    base's tokenizer (or `tokenizer`): a plain transformers folder."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base)
    merged = _peft().PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(target)
    (tokenizer or _tokenizer(base)).save_pretrained(target)
    return Path(target)
