"""Fixtures shared across test modules (session-scoped: built once per test run)."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """The offline tiny Qwen2 model + tokenizer (mappa_train.tiny_model), saved once per session."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from mappa_train.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny_model")))
