"""mappa_envs.seeding: the derived seeds keep the values runs, tests and published figures were made with."""
from __future__ import annotations

import pytest

from mappa_envs.driver import action_seed
from mappa_envs.dsbench.builtin import _task_rng
from mappa_envs.seeding import derive_seed, name_key, sequence_seed, stride_seed
from mappa_train.evaluation.runner import episode_seed

pytestmark = pytest.mark.unit


def test_action_seeds_are_derive_seed_with_their_old_values():
    assert [action_seed(5, i) for i in range(3)] == [1764030120, 505660990, 120231812]
    assert action_seed(123456789, 17) == derive_seed(123456789, 17) == 975502164
    assert action_seed(None, 3) is None


def test_derive_seed_is_31_bits_and_refuses_other_types():
    assert all(0 <= derive_seed("eval", i) < 2**31 for i in range(1000))
    with pytest.raises(TypeError):
        derive_seed(1.5)
    with pytest.raises(TypeError):
        derive_seed()


def test_compat_forms_keep_their_values():
    assert episode_seed(0, "eval", "synthetic-3", 0) == sequence_seed(0, "eval/synthetic-3", 0) == 2759264371
    assert episode_seed(7, "heldout", "aime-12", 3) == 502355096
    assert _task_rng(3, "housing").integers(0, 2**31, 3).tolist() == [1283212205, 1122412782, 1325410865]
    assert name_key("verifier") == 4220602952
    assert stride_seed(2, 5) == 2_000_011


def test_the_noisy_coach_draws_keep_their_keys():
    from mappa_envs.coach.noisy import NoisyCoach
    from mappa_envs.coach.rule import RuleCoach
    from mappa_envs.coach.types import CoachRequest

    r = CoachRequest("MathChat-v0", "verifier", "d", "What is 2+2?", "The answer is 4 é", context="ctx", action_index=2)
    assert NoisyCoach(RuleCoach(), 0.5, seed=3)._key(r) == 7254170708034766448
