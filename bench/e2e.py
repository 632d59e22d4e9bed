#!/usr/bin/env python3
"""End-to-end check of normkit inside Hugging Face models (GPU machine only).

For each model -- BART (BartForConditionalGeneration, bart-base sizes) and a small Llama
(LlamaForCausalLM) -- and each precision (fp32, bf16 autocast), it trains the same randomly
initialised model on the same random token ids twice: once as built (torch.nn.LayerNorm /
LlamaRMSNorm) and once after normkit.swap_norms (BART: the default mapping; Llama: the mapping
{LlamaRMSNorm: normkit.nn.RMSNorm}). It reports steps/s of both, and checks that the two loss
curves agree step by step within a tolerance. Nothing is downloaded: configs are written out
here, weights are random, there is no tokenizer. Dropout is set to 0 so that both runs see the
same computation.

    python bench/e2e.py [--out bench/results/h200-e2e.md] [--steps 20] [--models bart,llama] [--repeats 3]
    python bench/e2e.py --profile [--models bart --precisions bf16]   # where the time goes
    python bench/e2e.py --shape 1x64 --out /tmp/host.md              # host time alone (tiny steps)

--profile skips the timed comparison: it runs a few steps of both models under torch.profiler (torch,
normkit, normkit, torch) and prints, per run, the wall time per step, the GPU kernel time per step and
the kernels taking most of it, then the host ops (ATen ops and CUDA runtime calls) whose calls or self
CPU time per step differ most between the torch and the normkit runs.

Exit status 1 when any loss curve disagrees beyond its tolerance.
"""
import argparse
import copy
import datetime
import os
import statistics
import subprocess
import sys
import time

import torch

import normkit

# max |loss_normkit - loss_torch| / |loss_torch| over the steps
TOLERANCE = {"fp32": 1e-3, "bf16": 2e-2}


def bart_model():
    from transformers import BartConfig, BartForConditionalGeneration

    config = BartConfig(  # facebook/bart-base sizes
        vocab_size=50265, d_model=768, encoder_layers=6, decoder_layers=6, encoder_attention_heads=12,
        decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072, max_position_embeddings=1024,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, scale_embedding=False,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2)
    return BartForConditionalGeneration(config), None


def llama_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    config = LlamaConfig(
        vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=16, max_position_embeddings=2048, rms_norm_eps=1e-6, attention_dropout=0.0,
        tie_word_embeddings=False)
    return LlamaForCausalLM(config), {LlamaRMSNorm: normkit.nn.RMSNorm}


MODELS = {"bart": (bart_model, "BartForConditionalGeneration (bart-base config)", 8, 512),
          "llama": (llama_model, "LlamaForCausalLM (1024 hidden, 8 layers)", 8, 1024)}


def make_batches(vocab, steps, batch, seq, device):
    g = torch.Generator(device=device).manual_seed(1234)
    # ids >= 4 avoid BART's special tokens (pad = 1); labels are the inputs (a copy task)
    return [torch.randint(4, vocab, (batch, seq), generator=g, device=device) for _ in range(steps)]


def train(model, batches, precision, warmup):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    model.train()
    losses = []
    start = None
    for i, ids in enumerate(batches):
        if i == warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    return [float(v) for v in losses], (len(batches) - warmup) / elapsed


def profile(model, batches, precision, label, top=12):
    """A few steps under torch.profiler: wall ms/step, GPU kernel ms/step, the heaviest kernels."""
    from torch.profiler import ProfilerActivity, profile as torch_profile

    train(model, batches[:3], precision, 1)  # warm-up (allocator, cuBLAS heuristics)
    steps = batches[3:6]
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        train(model, steps, precision, 0)
        wall = (time.perf_counter() - start) / len(steps)
    # GPU work only: the optimizer's and the profiler's own annotations also appear as CUDA ranges,
    # and their length follows the host
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA
               and not getattr(e, "is_user_annotation", False) and not e.key.startswith(("Optimizer.", "ProfilerStep"))]
    total = sum(e.self_device_time_total for e in kernels) / len(steps)
    print(f"## {label}: wall {wall * 1e3:.2f} ms/step (profiled), GPU kernels {total / 1e3:.2f} ms/step", flush=True)
    for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:top]:
        print(f"  {e.self_device_time_total / len(steps) / 1e3:8.3f} ms  {e.count // len(steps):5d}x  {e.key[:110]}")
    # host side: the norm ops' CPU time per call (total = with what they call), and the busiest host ops
    ops = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CPU]
    for e in sorted((e for e in ops if "norm" in e.key.lower()), key=lambda e: -e.cpu_time_total)[:8]:
        print(f"  host {e.cpu_time_total / max(e.count, 1):8.1f} us/call total, {e.self_cpu_time_total / max(e.count, 1):7.1f} "
              f"self, {e.count // len(steps):4d}x/step  {e.key[:90]}")
    print(f"  host ops by self CPU time per step: " + ", ".join(
        f"{e.key[:40]} {e.self_cpu_time_total / len(steps) / 1e3:.2f} ms"
        for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[:8]))
    norm = [e for e in kernels if any(k in e.key.lower() for k in ("norm", "layer_norm", "gamma", "reduce_partials"))]
    print(f"  norm-like kernels: {sum(e.self_device_time_total for e in norm) / len(steps) / 1e3:.3f} ms/step, "
          f"{sum(e.count for e in norm) // len(steps)} launches/step", flush=True)
    # per host op (ATen ops and CUDA runtime calls alike): calls and self CPU us per step, for host_diff
    return {e.key: (e.count / len(steps), e.self_cpu_time_total / len(steps)) for e in ops}


def host_diff(base, other, label, top=25):
    """The host ops whose self CPU time per step differs most between two profiled runs: where one
    side's extra host time goes (ops it calls that the other does not, or calls more often)."""
    keys = set(base) | set(other)
    rows = sorted(keys, key=lambda k: -abs(other.get(k, (0, 0))[1] - base.get(k, (0, 0))[1]))
    total_base = sum(v[1] for v in base.values())
    total_other = sum(v[1] for v in other.values())
    print(f"## {label}: host self CPU per step {total_base / 1e3:.2f} -> {total_other / 1e3:.2f} ms; "
          f"the {top} ops that moved most (calls/step, us/step, torch -> normkit):")
    for k in rows[:top]:
        (nb, tb), (no, to) = base.get(k, (0, 0)), other.get(k, (0, 0))
        print(f"  {to - tb:+9.1f} us  {nb:7.1f} -> {no:7.1f} calls  {tb:9.1f} -> {to:9.1f} us  {k[:90]}")
    print(flush=True)


def git_commit(given=None):
    """The commit measured: --commit (the GPU machine's copy of the tree has no .git, and a git found
    above it would name the wrong one), else git's answer here."""
    if given:
        return given
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown (no git commit)"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "h200-e2e.md"))
    parser.add_argument("--commit", default=None, help="commit to record (default: git rev-parse --short HEAD)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5, help="steps excluded from steps/s (still in the curves)")
    parser.add_argument("--models", default="bart,llama")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--shape", default=None, metavar="BxS",
                        help="batch x sequence length for every model instead of its own (e.g. 1x64: a step "
                             "with almost no GPU work, so steps/s compares host time alone)")
    parser.add_argument("--profile", action="store_true", help="profile a few steps of each run instead of timing")
    parser.add_argument("--repeats", type=int, default=3,
                        help="timed runs of each side, alternating torch / normkit (order swapped every repeat); "
                             "steps/s is their median")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("bench/e2e.py needs a CUDA device")
    if not normkit.built_with_cuda():
        sys.exit("normkit was built without CUDA; reinstall it on the GPU machine")
    if args.warmup >= args.steps:
        sys.exit("--warmup must be smaller than --steps")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32 in both runs
    torch.backends.cudnn.allow_tf32 = False

    rows, curves, failures = [], [], []
    for name in args.models.split(","):
        build, label, batch, seq = MODELS[name]
        if args.shape:
            batch, seq = (int(v) for v in args.shape.lower().split("x"))
        for precision in args.precisions.split(","):
            torch.manual_seed(0)
            base, mapping = build()
            base = base.cuda()
            swapped = copy.deepcopy(base)
            count = normkit.swap_norms(swapped, mapping)
            if count == 0:
                sys.exit(f"{name}: swap_norms replaced no module")
            batches = make_batches(base.config.vocab_size, args.steps, batch, seq, "cuda")
            if args.profile:
                # torch, normkit, normkit, torch: a drift of the host over the process shows as the two
                # runs of one side disagreeing, and cancels in the diff of their sums
                runs = {"torch": [], "normkit": []}
                for side in ("torch", "normkit", "normkit", "torch"):
                    model = copy.deepcopy(base if side == "torch" else swapped)
                    runs[side].append(profile(model, batches, precision, f"{name} {precision} {side}"))
                    del model
                    torch.cuda.empty_cache()
                both = {side: {k: tuple(sum(r.get(k, (0, 0))[i] for r in rs) / len(rs) for i in (0, 1))
                               for k in set().union(*rs)} for side, rs in runs.items()}
                host_diff(both["torch"], both["normkit"], f"{name} {precision} host ops (mean of two runs each)")
                del base, swapped
                torch.cuda.empty_cache()
                continue
            # Alternating runs from the same initial weights (the order swapped every repeat), medians of
            # steps/s: a host-bound step drifts by several % within one process, so one run of each side
            # after the other measured the drift as much as the norms.
            sps = {"torch": [], "normkit": []}
            losses = {}
            for r in range(args.repeats):
                for side in (("torch", "normkit") if r % 2 == 0 else ("normkit", "torch")):
                    model = copy.deepcopy(base if side == "torch" else swapped)
                    side_losses, side_sps = train(model, batches, precision, args.warmup)
                    del model
                    torch.cuda.empty_cache()
                    sps[side].append(side_sps)
                    losses.setdefault(side, side_losses)
            del base, swapped
            torch.cuda.empty_cache()
            torch_losses, nk_losses = losses["torch"], losses["normkit"]
            torch_sps, nk_sps = statistics.median(sps["torch"]), statistics.median(sps["normkit"])
            spread = {k: (min(v), max(v)) for k, v in sps.items()}
            diff = max(abs(a - b) / abs(b) for a, b in zip(nk_losses, torch_losses))
            ok = diff <= TOLERANCE[precision]
            if not ok:
                failures.append(f"{name} {precision}: max relative loss difference {diff:.2e}")
            rows.append((label, precision, f"{batch}x{seq}", count, torch_sps, nk_sps, torch_losses, nk_losses,
                         diff, ok, spread))
            curves.append((name, precision, torch_losses, nk_losses))
            print(f"{name:6s} {precision}: torch {torch_sps:.2f} steps/s ({spread['torch'][0]:.2f}-{spread['torch'][1]:.2f}), "
                  f"normkit {nk_sps:.2f} steps/s ({spread['normkit'][0]:.2f}-{spread['normkit'][1]:.2f}) "
                  f"({nk_sps / torch_sps:.3f}x), {count} norms swapped, max rel loss diff {diff:.2e} "
                  f"{'ok' if ok else 'FAIL'}", flush=True)

    if args.profile:
        return
    lines = [
        "# normkit end-to-end: Hugging Face training steps, torch norms vs normkit.swap_norms",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- GPU: {torch.cuda.get_device_name()}",
        f"- torch: {torch.__version__} (CUDA {torch.version.cuda})",
        f"- normkit commit: {git_commit(args.commit)}",
        f"- {args.steps} AdamW steps (lr 1e-4) on random token ids, same seed and data for both runs; dropout 0; "
        f"TF32 off; steps/s over steps {args.warmup + 1}-{args.steps}; {args.repeats} runs of each side from the same "
        f"initial weights, alternating (torch first, then normkit first, ...): median steps/s (range)",
        "- tolerance on the loss curves: max over steps of |loss_normkit - loss_torch| / |loss_torch| <= "
        + ", ".join(f"{k} {v:g}" for k, v in TOLERANCE.items()),
        "",
        "| model | precision | batch x seq | norms swapped | torch steps/s (range) | normkit steps/s (range) | speedup "
        "| loss step 1 | loss step N (torch / normkit) | max rel loss diff | curves agree |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, precision, shape, count, tsps, nsps, tl, nl, diff, ok, spread in rows:
        lines.append(f"| {label} | {precision}{' autocast' if precision == 'bf16' else ''} | {shape} | {count} "
                     f"| {tsps:.2f} ({spread['torch'][0]:.2f}-{spread['torch'][1]:.2f}) "
                     f"| {nsps:.2f} ({spread['normkit'][0]:.2f}-{spread['normkit'][1]:.2f}) | {nsps / tsps:.3f}x | {tl[0]:.4f} | {tl[-1]:.4f} / {nl[-1]:.4f} "
                     f"| {diff:.2e} | {'yes' if ok else 'NO'} |")
    lines += ["", "## Loss curves", "", "| step | " + " | ".join(
        f"{n} {p} torch | {n} {p} normkit" for n, p, _, _ in curves) + " |",
        "|---|" + "---|---|" * len(curves)]
    for i in range(args.steps):
        lines.append(f"| {i + 1} | " + " | ".join(f"{t[i]:.5f} | {k[i]:.5f}" for _, _, t, k in curves) + " |")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    if failures:
        print("loss curves disagree: " + "; ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
