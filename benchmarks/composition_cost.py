"""What direct logit attribution and composition cost (docs/performance.md, "Composition").

On the demo organism's final checkpoint (`headtrace demo --out OUT`: OUT/organisms/dense/step002000)
with the demo's screen: one screen, the weight-only composition of its induction heads, and the
causal composition (one screen per earlier head). Then a screen of a random Pythia-160M-shaped
GPT-NeoX with and without the attribution (replaced by a no-op), alternating.

    python benchmarks/composition_cost.py OUT/organisms/dense/step002000 [--repeats 3]
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

import headtrace.screen
from headtrace.composition import circuit_heads, composition_table
from headtrace.models import ModelAdapter, load_model, load_tokenizer
from headtrace.organism.corpus import CorpusConfig
from headtrace.organism.demo import demo_screen
from headtrace.probes import build_probe, synthetic_induction
from headtrace.schema import ScreenConfig
from headtrace.screen import screen


class NoAttribution:
    """The screen's attribution, doing nothing (the screen as it was without it)."""

    def __init__(self, adapter, acc_dtype):
        self.shape = (adapter.layout.n_layers, adapter.layout.n_heads)

    def keep(self, layer, at_query):
        pass

    def final_residual(self, at_query):
        import contextlib

        return contextlib.nullcontext()

    def add(self, answer, hidden):
        pass

    def means(self):
        return torch.full(self.shape, float("nan"))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def organism(path: str, repeats: int) -> None:
    adapter = load_model(path)
    config = demo_screen(CorpusConfig())
    probe = build_probe(config.probe, lambda: load_tokenizer(path, None, False, None))
    heads = screen(adapter, probe, config).heads
    receivers = circuit_heads(heads)
    earlier = max(layer for layer, _ in receivers) * adapter.layout.n_heads
    for _ in range(repeats):
        t_screen = timed(lambda: screen(adapter, probe, config))
        t_weights = timed(lambda: composition_table(adapter, heads))
        t_causal = timed(lambda: composition_table(adapter, heads, probe, config, causal=True))
        print(
            f"organism: {len(receivers)} induction heads, {earlier} earlier heads; screen {t_screen:.2f} s, "
            f"composition from the weights {t_weights:.3f} s, causal {t_causal:.2f} s"
        )


def pythia_shape(repeats: int, n: int) -> None:
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(
        GPTNeoXConfig(
            vocab_size=50304,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            rotary_pct=0.25,
        )
    ).eval()
    model.config._attn_implementation = "sdpa"
    adapter = ModelAdapter(model)
    config = ScreenConfig.of(n_examples=n, seq_len=256, batch_size=16)
    probe = synthetic_induction(config.probe)
    real = headtrace.screen.DirectLogitAttribution
    screen(adapter, probe, config.replace(n_examples=16))  # warm-up
    for _ in range(repeats):
        times = {}
        for name, kind in (("with", real), ("without", NoAttribution)):
            headtrace.screen.DirectLogitAttribution = kind
            try:
                times[name] = timed(lambda: screen(adapter, probe, config))
            finally:
                headtrace.screen.DirectLogitAttribution = real
        print(f"pythia-160m shape, n={n}: screen with DLA {times['with']:.2f} s, without {times['without']:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", help="the demo organism's final checkpoint")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=64, help="examples of the Pythia-shaped screen")
    args = parser.parse_args()
    organism(args.checkpoint, args.repeats)
    pythia_shape(args.repeats, args.n)


if __name__ == "__main__":
    main()
