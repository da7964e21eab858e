"""Peak memory of a screen as the probe grows: headtrace's streamed screen vs holding full patterns.

Each measurement runs in a fresh process and reports its peak resident set size (ru_maxrss), so
one run cannot inherit another's allocations. Usage:

    python benchmarks/screen_memory.py [--sizes 64 512] [--seq-len 256]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

MODEL = dict(num_hidden_layers=6, num_attention_heads=8, hidden_size=256, intermediate_size=1024,
             vocab_size=10240, rotary_pct=0.25, max_position_embeddings=512)


def measure(method: str, n: int, seq_len: int) -> dict:
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from headtrace.models import ModelAdapter
    from headtrace.probes import SyntheticInductionSpec, synthetic_induction
    from headtrace.screen import ScreenConfig, screen

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(**MODEL, attn_implementation="sdpa")).eval()
    probe = synthetic_induction(SyntheticInductionSpec(n_examples=n, seq_len=seq_len))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if method == "headtrace":
        screen(ModelAdapter(model), probe, ScreenConfig(n_examples=n, seq_len=seq_len, batch_size=16))
    else:  # the naive way: full attention patterns of the whole batch, then the arithmetic
        model.config._attn_implementation = "eager"
        kept = []
        with torch.no_grad():
            for start in range(0, n, 16):
                out = model(torch.as_tensor(probe.input_ids[start:start + 16]), output_attentions=True)
                kept.append(torch.stack(out.attentions))
        torch.cat(kept, dim=1).mean()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"method": method, "n": n, "peak_mib": peak / 1024, "growth_mib": (peak - before) / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 512])
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one[0], int(args.one[1]), args.seq_len)))
        return
    rows = []
    for method in ("headtrace", "full-patterns"):
        for n in args.sizes:
            out = subprocess.run([sys.executable, __file__, "--one", method, str(n), "--seq-len", str(args.seq_len)],
                                 check=True, capture_output=True, text=True).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"{'method':<14} {'n':>6} {'peak RSS MiB':>13} {'growth MiB':>11}")
    for r in rows:
        print(f"{r['method']:<14} {r['n']:>6} {r['peak_mib']:>13.1f} {r['growth_mib']:>11.1f}")
    for method in ("headtrace", "full-patterns"):
        small, large = [r for r in rows if r["method"] == method][0], [r for r in rows if r["method"] == method][-1]
        print(f"{method}: peak at n={large['n']} / n={small['n']} = {large['peak_mib'] / small['peak_mib']:.2f}")


if __name__ == "__main__":
    main()
