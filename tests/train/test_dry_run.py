"""`mappa train --dry-run` on the paper's presets: model resolved, template checked, engines and learner
ranks placed on the declared GPUs with fractions vLLM accepts, and an exit code that says if it fits.

The presets name hub models, which cannot be fetched here: stand-in directories hold the real
config.json and the real chat template of each preset's model (tests/fixtures/chat_templates).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from mappa_train.config import load_config
from mappa_train.placement import Shape, activation_bytes, dry_run
from tests.chat_fixtures import TEMPLATES, family_tokenizer

ROOT = Path(__file__).resolve().parents[2]
BENCH = next((p for p in (ROOT.parent / "shared" / "data" / "bench", Path("/work/shared/data/bench")) if p.is_dir()),
             None)
PRESETS = {"mathchat": ("qwen3-thinking-2507", "Qwen3-4B-Thinking-2507"), "dsbench": ("qwen3", "Qwen3-4B")}


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    out = {}
    for preset, (family, model) in PRESETS.items():
        d = tmp_path_factory.mktemp(model)
        family_tokenizer(family).save_pretrained(d)
        shutil.copy(TEMPLATES / f"{model}.config.json", d / "config.json")
        out[preset] = d
    return out


def preset(name: str, model_dir: Path, *overrides: str):
    if name.startswith("mathchat"):
        data = [f"env.kwargs={{task_source: {BENCH / 'AIME_1983_2024.json'}, split: all}}"]
    else:
        data = ["env.kwargs={}"]  # DSBench's built-in tasks: the preset's CSV folder is not here
    return load_config(ROOT / "configs" / f"{name}.yaml", [f"model.path={model_dir}", *data, *overrides])


def run(cfg) -> tuple[int, str]:
    lines: list[str] = []
    rc = dry_run(cfg, echo=lines.append)
    return rc, "\n".join(lines)


@pytest.mark.skipif(BENCH is None, reason="the reference AIME problems (../shared/data/bench) are not here")
@pytest.mark.parametrize("name", PRESETS)
def test_the_presets_plan_fits_eight_gpus(name, stand_ins):
    rc, out = run(preset(name, stand_ins[name]))
    assert rc == 0, out
    assert "4.02 B parameters" in out
    assert "chat template: ok" in out
    assert "activations per micro-batch of 32768 tokens" in out
    roles = {"mathchat": "problem_solver, code_executor, verifier", "dsbench": "data_engineer, modeler, analyst"}[name]
    share = {"mathchat": 0.7, "dsbench": 0.8}[name] / 3
    for worker in (0, 1):  # one GPU per rollout worker; its three engines' fractions add up to the preset's
        assert f"rollout worker {worker}: vLLM engines {roles}: gpu_memory_utilization {share:.3f} each" in out
    assert out.count("learner ") == 6
    assert "GPU 7 (node 0)" in out
    assert "GPU 8" not in out
    assert out.splitlines()[-1] == "the plan fits: ready to train"


@pytest.mark.skipif(BENCH is None, reason="the reference AIME problems (../shared/data/bench) are not here")
def test_the_lora_preset_fits_one_gpu(stand_ins):
    """configs/mathchat_lora.yaml: one multi-LoRA engine and one learner (base + adapters, no reference)
    on one 80 GB GPU, where the same model per role needs eight (docs/lora.md)."""
    d = stand_ins["mathchat"]
    rc, out = run(preset("mathchat_lora", d))
    assert rc == 0, out
    assert "vLLM engine, multi-LoRA problem_solver, code_executor, verifier: gpu_memory_utilization 0.700" in out
    assert out.count("learner ") == 1
    assert "base + 3 LoRA adapters (45 MiB fp32 each)" in out
    assert "reference 0.0 GiB" in out
    assert "GPU 0 (node 0): 76.3 GiB of 80.0 GiB" in out
    rc, out = run(preset("mathchat_lora", d, "lora.groups={checkers: [code_executor, verifier]}"))
    assert rc == 0
    assert "base + 2 LoRA adapters" in out
    rc, out = run(preset("mathchat_lora", d, "lora.groups={checkers: [coder]}"))
    assert rc == 1
    assert "problem: lora.groups names roles ['coder'] that MathChat-v0 does not have" in out
    rc, out = run(preset("mathchat", d, "ray.enabled=false", "hardware.gpus=1", "model.policies=per_role"))
    assert rc == 1
    assert "the learners need 126.7 GiB" in out


@pytest.mark.skipif(BENCH is None, reason="the reference AIME problems (../shared/data/bench) are not here")
def test_plans_that_do_not_fit_say_why(stand_ins):
    d = stand_ins["mathchat"]
    rc, out = run(preset("mathchat", d, "hardware.gpus=4"))
    assert rc == 1
    assert "no GPU left for learner" in out
    assert "would not start" in out
    rc, out = run(preset("mathchat", d, "generation.vllm_gpu_memory_utilization=0.3"))
    assert rc == 1
    assert "< max_model_len 28672: vLLM refuses to start" in out
    rc, out = run(preset("mathchat", d, "ray.enabled=false", "hardware.gpus=1"))  # everything on one GPU
    assert rc == 1
    assert "the learners need" in out
    assert "GPU 0 needs" in out
    rc, out = run(preset("mathchat", d, "generation.max_prompt_tokens=262144"))
    assert rc == 1
    assert "> the model's context 262144" in out


def test_a_bad_template_or_missing_data_is_reported(tmp_path, stand_ins):
    bad = tmp_path / "bad"
    shutil.copytree(stand_ins["dsbench"], bad)
    tok = family_tokenizer("qwen3")
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # never opens the assistant turn
    tok.save_pretrained(bad)
    rc, out = run(preset("dsbench", bad))
    assert rc == 1
    assert "problem: chat template: the chat template ignores add_generation_prompt" in out
    rc, out = run(load_config(ROOT / "configs" / "mathchat.yaml", [f"model.path={stand_ins['mathchat']}",
                                                                    "env.kwargs={task_source: /nonexistent.json}"]))
    assert rc == 1
    assert "env MathChat-v0 cannot be built from env.kwargs" in out


def test_cpu_runs_have_no_gpu_placement(tmp_path):
    rc, out = run(load_config(ROOT / "configs" / "mathchat_tiny.yaml", [f"out_dir={tmp_path}"]))
    assert rc == 0
    assert "hardware.gpus=0: a CPU run" in out


def test_offline_hub_id_is_one_line_saying_what_to_do(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "mappa_cli", "train", "--config", "configs/dsbench.yaml",
                           "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("model:")]
    assert "'Qwen/Qwen3-4B'" in line
    assert "hf download Qwen/Qwen3-4B" in line
    assert "model.path" in line


def test_engines_of_one_process_share_the_memory_fraction(monkeypatch, tiny_model_dir):
    from mappa_train import factories, generation

    asked = []
    monkeypatch.setattr(generation, "make_generator", lambda backend, path, **kw: asked.append(kw) or object())
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", ["generation.backend=vllm",
                                                             "generation.vllm_gpu_memory_utilization=0.9"])
    factories.make_generators(cfg, tiny_model_dir, ["a", "b", "c"])
    assert [kw["gpu_memory_utilization"] for kw in asked] == [pytest.approx(0.3)] * 3  # 3 engines, 0.9 in all


def test_activation_estimate_scales_as_documented():
    shape = Shape.of({"hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536, "vocab_size": 49152,
                      "num_attention_heads": 9, "num_key_value_heads": 3, "tie_word_embeddings": True})
    assert 134e6 < shape.params < 135e6  # SmolLM2-135M
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", ["learner.grad_checkpointing=true", "model.dtype=float32"])
    a, b = activation_bytes(shape, 1000, cfg), activation_bytes(shape, 2000, cfg)
    chunk = cfg.learner.logprob_chunk_tokens  # 3 fp32 copies of a chunk's logits + the head's weight gradient
    assert b["layers"] == 2 * a["layers"]
    assert a["logits_chunk"] == 3 * chunk * 49152 * 4 + 49152 * 576 * 4
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", ["learner.grad_checkpointing=false", "model.dtype=float32"])
    assert activation_bytes(shape, 1000, cfg)["layers"] > 5 * a["layers"]  # every layer keeps everything


@pytest.mark.skipif(BENCH is None, reason="the reference AIME problems (../shared/data/bench) are not here")
def test_role_paths_are_described_and_planned_at_the_largest_size(stand_ins, tiny_model_dir):
    rc, out = run(preset("mathchat", stand_ins["mathchat"], f"model.role_paths={{verifier: {tiny_model_dir}}}"))
    assert rc == 1  # the tiny model's context is too short for the preset's prompts, and says so
    assert "max_new_tokens = 28672 > model.role_paths.verifier's context 4096" in out
    assert f"model.role_paths.verifier {tiny_model_dir} -> {tiny_model_dir}: 0.00 B parameters" in out
    assert "planned at the largest model's size (4.02 B), an upper bound" in out
