"""model.dtype: "auto" resolves in one place (mappa_train.precision) to bfloat16 where the hardware has
bf16 matrix units and to float32 elsewhere; a bf16 learner keeps fp32 master weights and scores
log-probs close to the fp32 learner's."""
from __future__ import annotations

import pytest
import torch

from mappa_train import precision
from mappa_train.config import AlgoConfig, ConfigError, LearnerConfig, load_config
from mappa_train.precision import resolve_precision


@pytest.mark.parametrize("units, expected", [(["AMX", "AVX512-BF16"], "bfloat16"), (["AVX512-BF16"], "bfloat16"),
                                             (["cuda"], "bfloat16"), ([], "float32")])
def test_auto_follows_the_hardware(monkeypatch, units, expected):
    monkeypatch.setattr(precision, "bf16_units", lambda: units)
    chosen = resolve_precision("auto")
    assert chosen.dtype == expected
    assert chosen.torch_dtype == getattr(torch, expected)
    line = chosen.describe()
    assert "\n" not in line
    assert expected in line
    assert "auto" in line
    if units and units != ["cuda"]:
        assert " and ".join(units) in line  # says why
    if not units:
        assert "neither AMX nor AVX512-BF16" in line


def test_explicit_settings_win_over_the_hardware(monkeypatch):
    monkeypatch.setattr(precision, "bf16_units", lambda: ["AMX"])
    assert resolve_precision("float32").dtype == "float32"
    monkeypatch.setattr(precision, "bf16_units", lambda: [])
    assert resolve_precision("bfloat16").dtype == "bfloat16"
    with pytest.raises(ValueError, match="model.dtype must be one of auto, bfloat16, float32"):
        resolve_precision("float16")


def test_this_machines_cpu_is_read():
    """On a CPU with AMX or AVX512-BF16 (/proc/cpuinfo amx_bf16, avx512_bf16) auto is bfloat16."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    if torch.cuda.is_available():
        pytest.skip("a GPU decides here")
    has = "amx_bf16" in flags or "avx512_bf16" in flags
    assert (resolve_precision("auto").dtype == "bfloat16") == has


def test_config_default_is_auto_and_bad_values_say_what_to_use():
    assert load_config(None, []).model.dtype == "auto"
    assert load_config(None, ["model.dtype=float32"]).model.dtype == "float32"
    with pytest.raises(ConfigError, match="model.dtype must be one of"):
        load_config(None, ["model.dtype=fp16"])


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from mappa_train.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), vocab_size=512, hidden_size=64, layers=2, heads=2,
                            kv_heads=1)


def test_a_bf16_learner_on_cpu_computes_in_bf16_over_fp32_weights(model_dir):
    """On CPU bf16 is autocast over fp32 weights that torch's AdamW steps directly (no DeepSpeed bf16
    wrapper): its log-probs are bf16's (close to, not equal to, fp32's) and the weights it hands the
    generator are fp32, which the bf16 generator rounds on load."""
    from mappa_train.learner import PolicyLearner, Sample

    cfg = LearnerConfig(lr=1e-3, micro_batch_size=2, train_batch_size=64)
    g = torch.Generator().manual_seed(0)
    samples = [Sample(torch.randint(5, 500, (9,), generator=g).tolist(),
                      torch.randint(5, 500, (5,), generator=g).tolist()) for _ in range(4)]
    fp32 = PolicyLearner(model_dir, cfg, AlgoConfig(), dtype="float32")
    bf16 = PolicyLearner(model_dir, cfg, AlgoConfig(), dtype="bfloat16")
    assert bf16.autocast
    assert not fp32.autocast
    assert all(p.dtype == torch.float32 for p in bf16.engine.module.parameters())
    assert type(bf16.engine.optimizer) is type(fp32.engine.optimizer)  # the plain fp32 optimizer, no bf16 wrapper
    gap = torch.cat([(a - b).abs() for a, b in zip(fp32.logprobs(samples), bf16.logprobs(samples))])
    assert 0 < float(gap.max()) < 0.1  # bf16 rounding, not another model
    ref = torch.cat(bf16.logprobs(samples, reference=True))
    assert torch.equal(ref, torch.cat(bf16.logprobs(samples)))  # the reference computes alike: KL starts at 0
    for s, lp in zip(samples, bf16.logprobs(samples)):
        s.old_logp, s.advantages = lp, torch.randn(len(lp), generator=g)
    before = {k: v.clone() for k, v in bf16.state_dict().items()}
    metrics = bf16.train(samples, 1e-3)
    assert torch.isfinite(torch.tensor(metrics["loss"]))
    assert metrics["grad_norm"] > 0
    after = bf16.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(v.dtype == torch.float32 for state in bf16.engine.optimizer.state.values()
               for v in state.values() if v.is_floating_point())
