"""headtrace's screen side by side with the reference method, TransformerLens and a plain forward.

One random-init GPT-NeoX model (Pythia-160M shape by default), the synthetic induction batch
(n x T), and four methods, each run in a fresh subprocess so that its peak memory is its own:

  (a) headtrace: `screen()` (six classes, sink score, PR, capability), one streamed pass;
  (b) reference: eager attention at batch 4 with `output_attentions=True` and full logits, keeping
      the query rows of all layers; a second pass for per-head outputs and PR; then the
      selectivity arithmetic in numpy (how the reference study's scripts work);
  (c) TransformerLens (3.9 or newer): the same HF model wrapped in a TransformerBridge, `run_with_cache` per
      sequence, selectivities, sink score and PR from the cached patterns and `hook_z`;
  (d) floor: one forward of the base model (no unembedding), SDPA attention, at (a)'s batch size.

Equal outputs of (a)-(c) are asserted on a small subset before timing, and again on every timed
run. Methods alternate round by round; medians of wall-clock seconds, ratios, and peak resident
memory (ru_maxrss of the subprocess; on CUDA, torch.cuda.max_memory_allocated) are printed. Then
peak memory of (a) and (b) as n grows (--memory-sizes), each in a fresh process.

    python benchmarks/screen_vs_peers.py                          # Pythia-160M shape, n=256, CPU
    python benchmarks/screen_vs_peers.py --config pythia-1b --device cuda --dtype bfloat16
    python benchmarks/screen_vs_peers.py --n 32 --repeats 1 --memory-sizes 64 256 --memory-config small
    python benchmarks/screen_vs_peers.py --n 16 --profile         # where each method's time goes

TransformerLens comes with the `bench` extra (`pip install -e '.[bench]'`); --skip-tl leaves (c) out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CONFIGS = {
    # GPT-NeoX shapes of the Pythia suite; random init (no download).
    "pythia-160m": dict(
        num_hidden_layers=12,
        num_attention_heads=12,
        hidden_size=768,
        intermediate_size=3072,
        vocab_size=50304,
        rotary_pct=0.25,
        max_position_embeddings=2048,
    ),
    "pythia-1b": dict(
        num_hidden_layers=16,
        num_attention_heads=8,
        hidden_size=2048,
        intermediate_size=8192,
        vocab_size=50304,
        rotary_pct=0.25,
        max_position_embeddings=2048,
    ),
    # A small model for quick checks and the memory sweep on slow machines.
    "small": dict(
        num_hidden_layers=6,
        num_attention_heads=8,
        hidden_size=256,
        intermediate_size=1024,
        vocab_size=10240,
        rotary_pct=0.25,
        max_position_embeddings=2048,
    ),
}
DEFAULT_N = {"pythia-160m": 256, "pythia-1b": 2000, "small": 256}
# --profile groups the self time of torch ops (name prefixes) to show where each method's time goes.
OP_GROUPS = {
    "matmul": ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"),
    "attention kernel": ("aten::_scaled_dot_product", "aten::scaled_dot_product"),
    "softmax, exp": ("aten::_softmax", "aten::softmax", "aten::_safe_softmax", "aten::exp"),
    "copies, indexing": (
        "aten::copy_",
        "aten::cat",
        "aten::stack",
        "aten::clone",
        "aten::contiguous",
        "aten::index",
        "aten::_to_copy",
        "aten::masked_fill",
        "aten::fill_",
        "aten::zero_",
        "aten::where",
    ),
}
METHODS = {"a": "headtrace", "b": "reference", "c": "transformerlens", "d": "floor"}
REFERENCE_BATCH = 4


# --------------------------------------------------------------------------------------------
# Setup shared by every method (deterministic: the same model in every process).


def build(config: str, n: int, seq_len: int, device: str, dtype: str):
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from headtrace.probes import ProbeSpec, synthetic_induction

    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(GPTNeoXConfig(**CONFIGS[config], attn_implementation="sdpa"))
    model = model.to(device=device, dtype=getattr(torch, dtype)).eval()
    probe = synthetic_induction(ProbeSpec(n_examples=n, seq_len=seq_len))
    return model, probe


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------
# The methods. Each returns the same outputs: per-head channel means, sink score, PR, capability.


def run_headtrace(model, probe, args) -> dict:
    from headtrace.models import ModelAdapter
    from headtrace.probes import CHANNELS
    from headtrace.screen import ScreenConfig, screen

    import headtrace.screen
    import torch

    config = ScreenConfig.of(
        n_examples=probe.n, seq_len=probe.seq_len, batch_size=args.batch_size, dtype=args.dtype, device=args.device
    )
    stream = headtrace.screen._stream
    if args.device.startswith("cuda"):  # any host sync inside the loop raises

        def strict(*a, **k):
            torch.cuda.set_sync_debug_mode("error")
            try:
                stream(*a, **k)
            finally:
                torch.cuda.set_sync_debug_mode("default")

        headtrace.screen._stream = strict
    try:
        result = screen(ModelAdapter(model), probe, config)
    finally:
        headtrace.screen._stream = stream
    heads, run = result.heads, result.run.iloc[0]
    shape = (int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1)
    out = {name: heads[f"mean_{name}"].to_numpy().reshape(shape) for name in CHANNELS}
    out.update(sink_score=heads.sink_score.to_numpy().reshape(shape), pr=heads.pr.to_numpy().reshape(shape))
    out.update({k: np.float64(run[k]) for k in ("top1", "loss")})
    return out


def outputs_from_rows(
    probe, rows: np.ndarray, sink: np.ndarray, at_query: np.ndarray, top1: float, loss: float
) -> dict:
    """The selectivity arithmetic: rows [n, layers, heads, L] of attention at the query,
    sink [n, layers, heads] (mean attention to key 0 over rows <= query), at_query
    [n, layers, heads, d] per-head outputs at the query."""
    n = probe.n
    index = np.arange(n)

    def take(pos):  # [n, layers, heads]
        return rows[index, :, :, pos]

    valid = probe.valid
    out = {
        "induction": take(np.maximum(probe.induction, 0))[valid].mean(0),
        "duplicate": take(np.maximum(probe.duplicate, 0))[valid].mean(0),
        "previous": take(probe.query - 1).mean(0),
        "first": take(np.zeros(n, dtype=int)).mean(0),
        "self": take(probe.query).mean(0),
        "local": np.mean([take(probe.local[:, k]) for k in range(probe.local.shape[1])], axis=0).mean(0),
        "null": take(probe.null).mean(0),
        "baseline": np.stack([rows[i][..., probe.baseline[i][probe.baseline[i] >= 0]].mean(-1) for i in range(n)]).mean(
            0
        ),
        "sink_score": sink.mean(0),
    }
    n_layers, n_heads = at_query.shape[1:3]
    pr = np.zeros((n_layers, n_heads))
    for l in range(n_layers):
        for h in range(n_heads):
            s = np.linalg.svd(at_query[:, l, h].astype(np.float64), compute_uv=False)
            p = s**2 / (s**2).sum()
            p = p[p > 0]
            pr[l, h] = np.exp(-(p * np.log(p)).sum())
    out.update(pr=pr, top1=np.float64(top1), loss=np.float64(loss))
    return out


def capability(logits_at_query, answer) -> tuple[float, float]:
    import torch

    logits = logits_at_query.double()
    answer_logit = logits.gather(1, answer[:, None])[:, 0]
    top1 = ((logits > answer_logit[:, None]).sum(1) < 1).double().mean().item()
    loss = (torch.logsumexp(logits, 1) - answer_logit).mean().item()
    return top1, loss


def run_reference(model, probe, args) -> dict:
    import torch

    from headtrace.models import ModelAdapter

    device = args.device
    adapter = ModelAdapter(model)
    ids = torch.as_tensor(probe.input_ids)
    query = torch.as_tensor(probe.query)
    rows, sinks, logits_q = [], [], []
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        for start in range(0, probe.n, REFERENCE_BATCH):
            stop = min(start + REFERENCE_BATCH, probe.n)
            out = model(ids[start:stop].to(device), output_attentions=True)  # full logits, full patterns
            q = query[start:stop].to(device)
            b = torch.arange(stop - start, device=device)
            att = torch.stack(out.attentions, dim=1)  # [b, layers, heads, L, L]
            rows.append(att[b, :, :, q].float().cpu().clone())  # the query rows of all layers, kept
            upto = (torch.arange(probe.seq_len, device=device)[None, :] <= q[:, None]).float()
            sinks.append((torch.einsum("blhq,bq->blh", att[..., 0].float(), upto) / upto.sum(1)[:, None, None]).cpu())
            logits_q.append(out.logits[b, q].float().cpu().clone())
        model.config._attn_implementation = "sdpa"
        captured: list[list[torch.Tensor]] = [[] for _ in adapter.out_proj]
        hooks = [
            proj.register_forward_pre_hook(lambda m, a, l=l: captured[l].append(a[0]))
            for l, proj in enumerate(adapter.out_proj)
        ]
        at_query = []
        try:
            for start in range(0, probe.n, REFERENCE_BATCH):  # second pass: per-head outputs
                stop = min(start + REFERENCE_BATCH, probe.n)
                model(ids[start:stop].to(device))
                b = torch.arange(stop - start, device=device)
                q = query[start:stop].to(device)
                at_query.append(torch.stack([c.pop()[b, q] for c in captured], dim=1).float().cpu())
        finally:
            for h in hooks:
                h.remove()
    layout = adapter.layout
    heads_out = torch.cat(at_query).view(probe.n, layout.n_layers, layout.n_heads, layout.head_dim).numpy()
    top1, loss = capability(torch.cat(logits_q), torch.as_tensor(probe.answer))
    return outputs_from_rows(probe, torch.cat(rows).numpy(), torch.cat(sinks).numpy(), heads_out, top1, loss)


def tl_bridge(model):
    """The HF model wrapped by TransformerLens (`TransformerBridge`, in 3.9 and later)."""
    from tokenizers import Tokenizer, models
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import PreTrainedTokenizerFast

    # Token ids go in directly; the bridge only needs some tokenizer object (no download).
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<|endoftext|>": 0, "<unk>": 1}, unk_token="<unk>")),
        eos_token="<|endoftext|>",
    )
    return TransformerBridge.boot_transformers(
        "EleutherAI/pythia-160m",
        hf_model=model,
        tokenizer=tokenizer,
        device=str(next(model.parameters()).device),
        dtype=next(model.parameters()).dtype,
    )


def run_transformerlens(bridge, probe, args) -> dict:
    import torch

    n_layers = bridge.cfg.n_layers
    rows, sinks, at_query, logits_q = [], [], [], []
    with torch.no_grad():
        for i in range(probe.n):
            q = int(probe.query[i])
            logits, cache = bridge.run_with_cache(torch.as_tensor(probe.input_ids[i : i + 1], device=args.device))
            patterns = torch.stack(
                [cache[f"blocks.{l}.attn.hook_pattern"][0] for l in range(n_layers)]
            )  # [layers, h, L, L]
            rows.append(patterns[:, :, q].float().cpu().clone())  # clone: a view would keep the whole cache alive
            sinks.append(patterns[:, :, : q + 1, 0].float().mean(-1).cpu())
            at_query.append(
                torch.stack([cache[f"blocks.{l}.attn.hook_z"][0, q] for l in range(n_layers)]).float().cpu()
            )
            logits_q.append(logits[0, q].float().cpu().clone())
    top1, loss = capability(torch.stack(logits_q), torch.as_tensor(probe.answer))
    return outputs_from_rows(
        probe, torch.stack(rows).numpy(), torch.stack(sinks).numpy(), torch.stack(at_query).numpy(), top1, loss
    )


def run_floor(model, probe, args) -> dict:
    import torch

    ids = torch.as_tensor(probe.input_ids, device=args.device)
    with torch.inference_mode():
        for start in range(0, probe.n, args.batch_size):
            model.base_model(input_ids=ids[start : start + args.batch_size], use_cache=False)
    return {}


# --------------------------------------------------------------------------------------------
# One measurement in this process (the parent calls it in a fresh subprocess).


def measure(method: str, args) -> dict:
    import torch

    torch.set_num_threads(args.threads or torch.get_num_threads())
    model, probe = build(args.config, args.n, args.seq_len, args.device, args.dtype)
    target = model
    if method == "c":
        target = tl_bridge(model)
    run = {"a": run_headtrace, "b": run_reference, "c": run_transformerlens, "d": run_floor}[method]
    run(target, probe.subset(slice(0, min(2, probe.n))), args)  # warm-up (lazy init, kernel choice): untimed
    if args.profile:
        return profile_run(method, run, target, probe, args)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    sync(args.device)
    t0, c0 = time.perf_counter(), time.process_time()
    outputs = run(target, probe, args)
    sync(args.device)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    if args.device.startswith("cuda"):
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if args.outputs:
        np.savez(args.outputs, **outputs)
    return {
        "method": method,
        "n": args.n,
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_mib": peak / 2**20,
        "growth_mib": (peak - before) / 2**20,
    }


def profile_run(method: str, run, target, probe, args) -> dict:
    """One run under torch.profiler: seconds of op self time per group of `OP_GROUPS`, the rest of
    the ops, and the time outside any torch op (Python, hooks, caching)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        run(target, probe, args)
        wall = time.perf_counter() - t0
    ops = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    groups = dict.fromkeys([*OP_GROUPS, "other ops"], 0.0)
    for name, seconds in ops.items():
        group = next((g for g, prefixes in OP_GROUPS.items() if name.startswith(prefixes)), "other ops")
        groups[group] += seconds
    groups["outside torch ops"] = wall - sum(ops.values())
    top = sorted(ops.items(), key=lambda kv: -kv[1])[:6]
    return {"method": method, "n": args.n, "wall_s": wall, "groups": groups, "top_ops": top}


def print_profiles(records: list[dict]) -> None:
    groups = list(records[0]["groups"])
    print(f"\nprofile (seconds; n={records[0]['n']}; wall under the profiler)")
    print("| method | wall | " + " | ".join(groups) + " |\n|---|" + "---:|" * (len(groups) + 1))
    for rec in records:
        print(
            f"| ({rec['method']}) {METHODS[rec['method']]} | {rec['wall_s']:.2f} | "
            + " | ".join(f"{rec['groups'][g]:.2f}" for g in groups)
            + " |"
        )
    for rec in records:
        print(f"top ops of {METHODS[rec['method']]}: " + ", ".join(f"{name} {s:.2f} s" for name, s in rec["top_ops"]))


def spawn(method: str, args, n: int | None = None, config: str | None = None, outputs: str | None = None) -> dict:
    """Run one measurement in a fresh Python process and return its record."""
    cmd = [
        sys.executable,
        __file__,
        "--one",
        method,
        "--config",
        config or args.config,
        "--n",
        str(n or args.n),
        "--seq-len",
        str(args.seq_len),
        "--device",
        args.device,
        "--dtype",
        args.dtype,
        "--batch-size",
        str(args.batch_size),
        "--threads",
        str(args.threads or 0),
    ]
    if outputs:
        cmd += ["--outputs", outputs]
    if args.profile:
        cmd.append("--profile")
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode:
        sys.exit(f"method {method} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare(a: dict, other: dict, name: str, rtol: float) -> float:
    """Assert equal outputs (selectivities to `rtol`); return the largest relative difference."""

    def sel(d: dict) -> dict:
        return {
            k: d[k] / np.maximum(d["baseline"], 1e-8)
            for k in ("induction", "duplicate", "previous", "first", "self", "local", "null")
        }

    worst = 0.0
    pairs = [
        *((f"sel_{k}", v, sel(other)[k]) for k, v in sel(a).items()),
        *((k, a[k], other[k]) for k in ("sink_score", "pr", "top1", "loss")),
    ]
    for key, x, y in pairs:
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        np.testing.assert_allclose(y, x, rtol=rtol, atol=rtol * 1e-2, err_msg=f"{name}: {key} differs from headtrace")
        worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-12))))
    return worst


def check_outputs(args, methods: list[str], workdir: str, n: int) -> None:
    files = {m: os.path.join(workdir, f"check-{m}.npz") for m in methods if m != "d"}
    for m, path in files.items():
        spawn(m, args, n=n, outputs=path)
    loaded = {m: dict(np.load(path)) for m, path in files.items()}
    for m in loaded:
        if m != "a":
            worst = compare(loaded["a"], loaded[m], METHODS[m], args.rtol)
            print(f"check n={n}: {METHODS[m]} equals headtrace (max relative difference {worst:.1e})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="pythia-160m")
    parser.add_argument("--n", type=int, default=None, help="probe size (default: 256; 2000 for pythia-1b)")
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--batch-size", type=int, default=None, help="headtrace's and the floor's micro-batch (default: ScreenConfig's)"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--skip-tl", action="store_true", help="leave out (c) TransformerLens")
    parser.add_argument("--skip-reference", action="store_true", help="leave out (b) the reference method")
    parser.add_argument("--check-n", type=int, default=16, help="examples in the equality check before timing")
    parser.add_argument(
        "--rtol",
        type=float,
        default=None,
        help="tolerance of the equality check (default 1e-3 in float32, 5e-2 otherwise)",
    )
    parser.add_argument(
        "--memory-sizes",
        type=int,
        nargs="*",
        default=[256, 2048],
        help="probe sizes of the memory sweep of (a) and (b); none to skip it",
    )
    parser.add_argument(
        "--memory-config",
        choices=sorted(CONFIGS),
        default="small",
        help="model of the memory sweep (default: small, so that n=2048 of the reference "
        "fits in minutes on a CPU; pass --memory-config pythia-160m for the full shape)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing rounds, run each method once under torch.profiler and print where its time goes",
    )
    parser.add_argument("--json", help="also write every record here")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--outputs", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.n is None:
        args.n = DEFAULT_N[args.config]
    if args.batch_size is None:
        from headtrace.screen import ScreenConfig

        args.batch_size = ScreenConfig().batch_size
    if args.rtol is None:
        args.rtol = 1e-3 if args.dtype == "float32" else 5e-2
    if args.one:
        print(json.dumps(measure(args.one, args)))
        return

    methods = ["a"] + ([] if args.skip_reference else ["b"]) + ([] if args.skip_tl else ["c"]) + ["d"]
    print(
        f"model {args.config} (random init), n={args.n} x T={args.seq_len}, {args.device} {args.dtype}, "
        f"headtrace/floor batch {args.batch_size}, reference batch {REFERENCE_BATCH}, repeats {args.repeats}; "
        f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}",
        flush=True,
    )
    if args.profile:
        print_profiles([spawn(m, args) for m in methods])
        return
    records = []
    with tempfile.TemporaryDirectory() as workdir:
        check_outputs(args, methods, workdir, min(args.check_n, args.n))
        for r in range(args.repeats):
            for m in methods:
                path = os.path.join(workdir, f"{m}.npz") if m != "d" else None
                rec = spawn(m, args, outputs=path)
                if m not in ("a", "d"):  # every timed run's outputs equal headtrace's of the same round
                    compare(dict(np.load(os.path.join(workdir, "a.npz"))), dict(np.load(path)), METHODS[m], args.rtol)
                records.append({**rec, "round": r})
                print(
                    f"round {r}: {METHODS[m]:<16} {rec['wall_s']:8.2f} s wall {rec['cpu_s']:8.2f} s cpu "
                    f"peak {rec['peak_mib']:8.0f} MiB",
                    flush=True,
                )

    memory = []
    for m in ("a", "b") if not args.skip_reference else ("a",):
        for n in args.memory_sizes:
            rec = spawn(m, args, n=n, config=args.memory_config)
            memory.append({**rec, "config": args.memory_config or args.config})
            print(
                f"memory: {METHODS[m]:<10} n={n:<6} peak {rec['peak_mib']:8.0f} MiB "
                f"(growth over the loaded model {rec['growth_mib']:7.0f} MiB, {rec['wall_s']:.0f} s)",
                flush=True,
            )
    report(records, memory, methods, args)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "runs": records, "memory": memory}, indent=1))


def report(records, memory, methods, args) -> None:
    med = {m: statistics.median(r["wall_s"] for r in records if r["method"] == m) for m in methods}
    med_cpu = {m: statistics.median(r["cpu_s"] for r in records if r["method"] == m) for m in methods}
    peak = {m: max(r["peak_mib"] for r in records if r["method"] == m) for m in methods}
    unit = "GPU MiB (max allocated)" if args.device.startswith("cuda") else "peak RSS MiB"
    print(f"\n| method | median wall s | median CPU s | / headtrace | {unit} |")
    print("|---|---:|---:|---:|---:|")
    for m in methods:
        print(f"| ({m}) {METHODS[m]} | {med[m]:.2f} | {med_cpu[m]:.2f} | {med[m] / med['a']:.2f} | {peak[m]:.0f} |")
    targets = [("(a)/(d) headtrace / floor", med["a"] / med["d"], "<= 1.15", med["a"] / med["d"] <= 1.15)]
    if "b" in med:
        targets.append(("(b)/(a) reference / headtrace", med["b"] / med["a"], ">= 2.5", med["b"] / med["a"] >= 2.5))
    if "c" in med:
        targets.append(("(c)/(a) TransformerLens / headtrace", med["c"] / med["a"], ">= 3", med["c"] / med["a"] >= 3))
    print("\n| ratio (median wall) | value | target | met |\n|---|---:|---|---|")
    for name, value, target, met in targets:
        print(f"| {name} | {value:.2f} | {target} | {'yes' if met else 'NO'} |")
    if memory:
        print(f"\nmemory vs n ({memory[0]['config']}, T={args.seq_len}, one fresh process each):")
        print(f"| method | n | {unit} | growth over loaded model MiB |\n|---|---:|---:|---:|")
        for rec in memory:
            print(f"| {METHODS[rec['method']]} | {rec['n']} | {rec['peak_mib']:.0f} | {rec['growth_mib']:.0f} |")
    if args.device.startswith("cuda"):
        print(f"\nseconds per revision (headtrace, n={args.n}): {med['a']:.2f}")


if __name__ == "__main__":
    main()
