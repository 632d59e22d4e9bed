"""Host-only BART steps: gc activity and object counts, torch vs normkit; then with gc disabled."""
import copy, gc, sys, time, statistics
import torch
sys.path.insert(0, "bench")
import e2e, normkit

stats = {"t": 0.0, "n": [0, 0, 0], "start": 0.0}
def cb(phase, info):
    if phase == "start":
        stats["start"] = time.perf_counter()
    else:
        stats["t"] += time.perf_counter() - stats["start"]
        stats["n"][info["generation"]] += 1
gc.callbacks.append(cb)

def run(model, batches, precision, label):
    stats["t"] = 0.0; stats["n"] = [0, 0, 0]
    gc.collect()
    objs0 = len(gc.get_objects())
    losses, sps = e2e.train(model, batches, precision, 5)
    objs1 = len(gc.get_objects())
    steps = len(batches)
    print(f"{label:28s} {sps:6.2f} steps/s  gc {stats['t']*1e3/steps:6.2f} ms/step  collections {stats['n']}  objects {objs0} -> {objs1}", flush=True)
    return sps

torch.backends.cuda.matmul.allow_tf32 = False
for precision in ("fp32", "bf16"):
    torch.manual_seed(0)
    base, mapping = e2e.bart_model()
    base = base.cuda()
    swapped = copy.deepcopy(base)
    normkit.swap_norms(swapped, mapping)
    batches = e2e.make_batches(base.config.vocab_size, 30, 1, 64, "cuda")
    for gc_on in (True, False):
        res = {"torch": [], "normkit": []}
        for r in range(3):
            for side in (("torch", "normkit") if r % 2 == 0 else ("normkit", "torch")):
                m = copy.deepcopy(base if side == "torch" else swapped)
                if not gc_on:
                    gc.collect(); gc.disable()
                res[side].append(run(m, batches, precision, f"{precision} gc={'on' if gc_on else 'off'} {side}"))
                gc.enable()
                del m; torch.cuda.empty_cache()
        t, n = statistics.median(res["torch"]), statistics.median(res["normkit"])
        print(f"== {precision} gc={'on' if gc_on else 'off'}: torch {t:.2f} normkit {n:.2f} ({n/t:.3f}x)", flush=True)
