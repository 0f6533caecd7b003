"""The policy layouts (mappa_train.policy_layout): shared, per-role and LoRA answer the same questions."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mappa_train.config import ConfigError, load_config
from mappa_train.policy_layout import FullModels, PolicyLayout, policy_layout

ROLES = ("problem_solver", "code_executor", "verifier")
CHECKERS = "lora.groups={checkers: [code_executor, verifier]}"

# model.policies -> (policy_of(ROLES), engines, adapters, starts_in_sync, unused settings)
EXPECTED = {
    "shared": ({r: "shared" for r in ROLES}, 1, 0, True, ("lora.",)),
    "per_role": ({r: r for r in ROLES}, 3, 0, True, ("lora.",)),
    "lora": ({"problem_solver": "problem_solver", "code_executor": "checkers", "verifier": "checkers"}, 1, 2, False,
             ()),
}


def cfg_of(policies: str, *overrides: str):
    return load_config(None, [f"model.policies={policies}", *([CHECKERS] if policies == "lora" else []), *overrides])


@pytest.mark.parametrize("policies", EXPECTED)
def test_every_layout_answers_the_protocol(policies, tmp_path):
    layout = policy_layout(cfg_of(policies))
    assert isinstance(layout, PolicyLayout)
    policy_of, engines, adapters, in_sync, unused = EXPECTED[policies]
    assert layout.policy_of(ROLES) == policy_of
    names = sorted(set(policy_of.values()))
    assert (layout.engines(names), layout.adapters(names)) == (engines, adapters)
    assert (layout.starts_in_sync, layout.unused_settings) == (in_sync, unused)
    assert layout.starts(names, tmp_path) == {n: tmp_path for n in names}
    with pytest.raises(ConfigError, match="holds no") as e:  # a checkpoint folder cut short: one line
        layout.export_policy(names[0], tmp_path / "checkpoints" / names[0], tmp_path, tmp_path / "out")
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_the_layout_is_read_from_model_policies_or_a_given_value():
    cfg = cfg_of("per_role")
    assert isinstance(policy_layout(cfg), FullModels)
    assert not policy_layout(cfg).shared
    assert policy_layout(cfg, "shared").shared
    assert policy_layout(cfg, "lora").unused_settings == ()


def test_per_role_starts_from_role_paths(tiny_model_dir, tmp_path):
    layout = policy_layout(cfg_of("per_role", f"model.role_paths={{verifier: {tiny_model_dir}}}"))
    assert layout.starts(ROLES, tmp_path) == {"problem_solver": tmp_path, "code_executor": tmp_path,
                                              "verifier": Path(tiny_model_dir)}
    with pytest.raises(ConfigError, match=r"model.role_paths names roles \['verifier'\]"):
        layout.policy_of(["problem_solver"])


def test_final_holds_the_lora_manifest_only_for_lora(tmp_path):
    """What `finish` adds beside final/<policy>/: LoRA's lora.json (base + role -> adapter); nothing else."""
    for policies in EXPECTED:
        final = tmp_path / policies
        final.mkdir()
        layout = policy_layout(cfg_of(policies))
        layout.finish(final, tmp_path, layout.policy_of(ROLES))
        written = sorted(p.name for p in final.iterdir())
        if policies == "lora":
            assert written == ["lora.json"]
            assert json.loads((final / "lora.json").read_text()) == {"base": str(tmp_path.resolve()),
                                                                     "roles": EXPECTED["lora"][0]}
        else:
            assert written == []


def test_one_lora_engine_gets_the_whole_vllm_share(monkeypatch, tiny_model_dir):
    """Every adapter sits in one engine: it gets all of vllm_gpu_memory_utilization, not a share per adapter."""
    from mappa_train import factories, lora

    asked = []
    monkeypatch.setattr(lora, "lora_generators", lambda cfg, path, names, **kw: asked.append(kw) or {})
    factories.make_generators(cfg_of("lora", "generation.backend=vllm", "generation.vllm_gpu_memory_utilization=0.9",
                                     "generation.max_prompt_tokens=1024"),
                              tiny_model_dir, ["checkers", "problem_solver"])
    assert [kw["gpu_memory_utilization"] for kw in asked] == [0.9]
