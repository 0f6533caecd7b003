"""The trainer's config: every preset loads, overrides apply, bad values fail with a clear message."""
from pathlib import Path

import pytest

from mappa_train.config import ConfigError, TrainConfig, from_dict, help_lines, load_config, to_dict

PRESETS = sorted((Path(__file__).parents[2] / "configs").glob("*.yaml"))


def test_presets_exist():
    assert {p.stem for p in PRESETS} >= {"mathchat", "dsbench", "quickstart"}


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_loads_and_round_trips(path):
    cfg = load_config(path)
    assert isinstance(cfg, TrainConfig)
    assert from_dict(to_dict(cfg)) == cfg


def test_paper_presets_carry_the_papers_settings():
    for name in ("mathchat", "dsbench"):
        cfg = load_config(PRESETS[[p.stem for p in PRESETS].index(name)])
        assert (cfg.algo.beta, cfg.algo.clip_eps, cfg.algo.whiten) == (0.01, 0.2, "global")
        assert cfg.model.policies == "per_role"
        assert cfg.rollout.samples_per_prompt == 2
        assert cfg.learner.lr == 1e-6
        assert cfg.learner.zero_stage == 3


def test_overrides_apply_with_types():
    cfg = load_config(None, ["learner.lr=1e-5", "algo.scope=episode", "learner.packed=false", "steps=3",
                             "env.kwargs={task_source: synthetic, num_tasks: 8}"])
    assert cfg.learner.lr == 1e-5
    assert cfg.algo.scope == "episode"
    assert cfg.learner.packed is False
    assert cfg.steps == 3
    assert cfg.env.kwargs == {"task_source": "synthetic", "num_tasks": 8}


@pytest.mark.parametrize("override, message", [
    ("learner.lr=abc", "learner.lr must be float"),
    ("learner.zero=1", "unknown config key 'learner.zero': learner has lr"),
    ("learner=1", "is a section"),
    ("algo.scope=turn", r"algo.scope must be one of \['action', 'agent', 'episode'\]"),
    ("steps=0", "steps must be > 0"),
    ("lr", "must look like key=value"),
    ("learner.zero_stage=4", "zero_stage must be 0, 1, 2 or 3"),
    ("algo.clip_eps=1.5", "clip_eps must be in"),
    ("generation.temperature=0", "temperature must be > 0 for training"),
    ("learner.offload_optimizer=true", "offload_optimizer needs learner.zero_stage >= 1"),
    ("learner.packed=maybe", "learner.packed must be true or false"),
    ("learner.lr=inf", "learner.lr must be finite"),
    ("algo.beta=.inf", "algo.beta must be finite"),
    ("rollout.stop_below={a: .nan}", "stop_below must map role names to coach scores"),
    ("out_dir=", "out_dir must name a folder"),
    ("env.kwargs={a: &x [1], b: *x}", "YAML aliases"),
])
def test_bad_override_errors_clearly(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_bad_yaml_errors_name_the_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learner: {lr: 1e-5, zero_stage: 9}\n")
    with pytest.raises(ConfigError, match="zero_stage must be"):
        load_config(bad)
    bad.write_text("learner: 3\n")
    with pytest.raises(ConfigError, match=f"{bad}: learner is a section"):
        load_config(bad)
    bad.write_text("lerner: {lr: 1}\n")
    with pytest.raises(ConfigError, match="unknown config key 'lerner'"):
        load_config(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_help_lists_every_leaf_with_its_doc():
    lines = help_lines()
    assert any(line.startswith("algo.beta = 0.01") and "KL coefficient" in line for line in lines)
    assert all("  " in line for line in lines)


def test_a_loaded_config_is_frozen():
    import dataclasses

    cfg = load_config(None, ["steps=3"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.steps = 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.learner.lr = 1.0


@pytest.mark.parametrize("override, message", [
    ("env.kwargs={num_task: 8}", "env.kwargs has 'num_task', which MathChat-v0 does not take; it takes .*num_tasks"),
    ("env.eval_sets={heldout: {splitt: eval}}", "env.eval_sets.heldout has 'splitt'"),
    ("env.kwargs={coach: rule}", "set env.coach"),
    ("env.sandbox_kwargs={memory: 3}", "env.sandbox_kwargs has \\['memory'\\].*memory_mb"),
    ("env.id=Nope-v0", "env.id 'Nope-v0' is not registered"),
])
def test_free_form_dicts_are_checked_against_their_consumers_at_load_time(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


@pytest.mark.parametrize("text, message", [
    ("env:\n  kwargs:\n    t: &a [x, x, x]\n    u: [*a, *a]\n", r"YAML aliases \(\*a\)"),
    ("steps: 2\nseed: 1\nsteps: 5000\n", r"key 'steps' is given twice \(line 3\)"),
    ("env:\n  kwargs:\n    x: " + "[" * 50_000 + "]" * 50_000 + "\n", "nest"),
    (b"steps: 2\n\xff\n", r"is not UTF-8 text \(byte 0xff at offset 9\)"),
])
def test_a_config_that_is_not_plain_data_is_one_line(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_config(tmp_path)


def test_a_config_is_read_no_further_than_its_cap(tmp_path):
    from mappa_envs.yaml_data import MAX_BYTES

    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_BYTES + "\nsteps: 2\n")
    with pytest.raises(ConfigError, match=f"has over {MAX_BYTES} bytes"):
        load_config(big)
    with pytest.raises(ConfigError, match="unknown config key 'Name'"):  # size 0 on disk, read to its end
        load_config("/proc/self/status")


def test_bad_yaml_syntax_names_line_and_column(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: 3\nlearner:\n  lr: [1e-5\n  zero_stage: 1\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: not valid YAML at line \d+, column \d+") as info:
        load_config(bad)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("override, message", [
    ("env.coach_kwargs={max_token: 5}",
     "env.coach_kwargs: unknown coach setting 'max_token'.*did you mean 'max_tokens'"),
    ("env.coach_kwargs={max_tokens: 5}", "env.coach is 'rule', which has no settings"),
])
def test_coach_settings_are_checked_at_load_time(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["env.coach=vllm-local" if "max_token:" in override else "env.coach=rule", override])


def test_a_coach_spec_and_its_settings_load():
    cfg = load_config(None, ["env.coach=judge@http://127.0.0.1:9/v1", "env.coach_kwargs={structured_output: true}"])
    assert (cfg.env.coach, cfg.env.coach_kwargs) == ("judge@http://127.0.0.1:9/v1", {"structured_output": True})


def test_the_eval_coach_scores_only_the_heldout_envs_and_a_bad_one_fails_at_load_time():
    from mappa_envs.coach.noisy import NoisyCoach
    from mappa_envs.coach.rule import RuleCoach
    from mappa_train.factories import make_envs

    cfg = load_config(Path(__file__).parents[2] / "configs" / "chain.yaml",
                      ["env.coach=rule:noise=0.5,seed=1", "env.eval_coach=rule"])
    assert isinstance(make_envs(cfg, 1)[0].unwrapped.coach, NoisyCoach)
    assert type(make_envs(cfg, 1, evaluation=True)[0].unwrapped.coach) is RuleCoach
    same = load_config(Path(__file__).parents[2] / "configs" / "chain.yaml", ["env.coach=rule:noise=0.5,seed=1"])
    assert isinstance(make_envs(same, 1, evaluation=True)[0].unwrapped.coach, NoisyCoach)  # unset: the training coach
    with pytest.raises(ConfigError, match="env.eval_coach 'rul': unknown coach 'rul'; use 'rule'") as info:
        load_config(None, ["env.eval_coach=rul"])
    assert "\n" not in str(info.value)


def test_role_paths_need_per_role_and_known_roles():
    with pytest.raises(ConfigError, match="model.role_paths gives roles their own models, which needs "
                                          "model.policies=per_role"):
        load_config(None, ["model.role_paths={verifier: tiny}"])
    from mappa_train.factories import policy_map

    cfg = load_config(None, ["model.policies=per_role", "model.role_paths={checker: tiny}"])
    with pytest.raises(ConfigError, match=r"model.role_paths names roles \['checker'\] that MathChat-v0 does not"):
        policy_map(cfg, ["problem_solver", "verifier"])


@pytest.mark.parametrize("mode", ["outcome", "backprop"])
def test_early_stopping_on_coach_scores_needs_a_mode_that_scores_each_action(mode):
    """Which reward modes score each action is one fact of the env (pipeline.SCORES_EACH_ACTION)."""
    stop = "rollout.stop_below.code_executor=4"
    assert load_config(None, [stop, "env.kwargs.reward_mode=process+outcome"]).rollout.stop_below
    with pytest.raises(ConfigError, match=f"reward_mode={mode} does not compute"):
        load_config(None, [stop, f"env.kwargs.reward_mode={mode}"])
