"""Architecture adapters: head layouts, unsupported architectures, loading, dtype/device checks."""

import pytest
import torch
from transformers import MambaConfig, MambaForCausalLM

from headtrace.errors import HeadtraceError
from headtrace.models import ModelAdapter, load_model, resolve_device, resolve_dtype
from models_zoo import BUILDERS, tiny_model

LAYOUTS = {  # (layers, heads, kv heads, head dim) of the tiny configs
    "gpt_neox": (2, 4, 4, 16),
    "olmo": (2, 4, 4, 16),
    "olmo2": (2, 4, 4, 16),
    "olmoe": (2, 4, 4, 16),
    "gpt2": (2, 4, 4, 16),
    "gpt_neo": (2, 4, 4, 16),
    "bloom": (2, 4, 4, 16),
    **{
        arch: (2, 4, 2, 16)
        for arch in (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen3",
            "qwen3_moe",
            "olmo3",
            "smollm3",
            "apertus",
            "gemma2",
            "gemma3_text",
            "gpt_oss",
            "phi3",
            "stablelm",
            "granite",
        )
    },
}


@pytest.mark.parametrize("arch", sorted(BUILDERS))
def test_layout(arch):
    layout = ModelAdapter(tiny_model(arch)).layout
    assert (layout.n_layers, layout.n_heads, layout.n_kv_heads, layout.head_dim) == LAYOUTS[arch]


def test_a_model_without_attention_is_refused_in_one_line():
    model = MambaForCausalLM(MambaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2))
    with pytest.raises(
        HeadtraceError,
        match="unsupported architecture 'mamba' .MambaForCausalLM.: no attention module "
        r"with an output projection in backbone.layers\[0\].*register_architecture",
    ) as error:
        ModelAdapter(model)
    assert "\n" not in str(error.value)


def test_query_logits_equal_full_forward():
    model = tiny_model("olmo")
    adapter = ModelAdapter(model)
    ids = torch.randint(0, 1000, (3, 20))
    positions = torch.tensor([19, 5, 11])
    with torch.no_grad():
        full = model(ids).logits[torch.arange(3), positions]
        got = adapter.logits_at(adapter.hidden_states(ids), positions)
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)


def test_load_local_directory(tmp_path):
    tiny_model("llama").save_pretrained(tmp_path / "ckpt")
    adapter = load_model(str(tmp_path / "ckpt"), dtype="bfloat16")
    assert adapter.dtype == torch.bfloat16 and adapter.model_type == "llama"


def test_bad_model_locations(tmp_path):
    with pytest.raises(HeadtraceError, match="does not exist"):
        load_model(str(tmp_path / "missing"))
    with pytest.raises(HeadtraceError, match="GGUF file"):
        load_model(str(tmp_path / "missing.gguf"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(HeadtraceError, match="cannot load model"):
        load_model(str(tmp_path / "empty"))


def test_device_and_dtype_checks():
    if not torch.cuda.is_available():
        with pytest.raises(HeadtraceError, match="no CUDA GPU"):
            resolve_device("cuda")
    with pytest.raises(HeadtraceError, match="unknown device"):
        resolve_device("tpu")
    with pytest.raises(HeadtraceError, match="unknown dtype"):
        resolve_dtype("float8", torch.device("cpu"))
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16


def test_gguf_loads_through_transformers(smollm2):
    layout = smollm2.layout
    assert smollm2.model_type == "llama"
    assert (layout.n_layers, layout.n_heads, layout.n_kv_heads, layout.head_dim) == (30, 9, 3, 64)
    assert smollm2.vocab_size == 49152


def test_non_finite_weights_fail_the_load(tmp_path):
    model = tiny_model("gpt_neox")
    with torch.no_grad():
        model.gpt_neox.layers[1].mlp.dense_h_to_4h.weight[0, 0] = float("nan")
    model.save_pretrained(tmp_path / "nan")
    with pytest.raises(HeadtraceError, match="NaN or inf weights in gpt_neox.layers.1.mlp"):
        load_model(str(tmp_path / "nan"))
