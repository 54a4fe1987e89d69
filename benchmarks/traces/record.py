"""Real PyTorch workloads whose allocation traces emm replays: each runs a few dozen steps of a
real model with the shapes real programs vary (sequence length, batch size, image size, KV-cache
length), under one allocator, and writes what it held and how long its steps took.

usage: python3 record.py WORKLOAD --allocator caching|expandable|emm --json FILE [--trace FILE]

WORKLOAD is one of transformer-train, llm-decode, cnn-varsize, finetune-checkpoint.
--trace FILE (caching only) records PyTorch's memory history and writes the snapshot
(`torch.cuda.memory._dump_snapshot`'s pickle), gzip-compressed when FILE ends in .gz.

Held memory is read twice: from the allocator's own counter where it has one
(`max_memory_reserved`) and from the driver (`cudaMemGetInfo`, used minus what was used before
the first allocation), sampled after every step. Live memory is `max_memory_allocated` for
PyTorch's allocators, emm's `peak_bytes` for emm.
"""

import argparse
import gzip
import json
import os
import pickle
import random
import subprocess
import sys
import time

WORKLOADS = ("transformer-train", "llm-decode", "cnn-varsize", "finetune-checkpoint")


def setup(allocator):
    if allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if allocator == "emm":
        import emm.torch

        emm.torch.use_emm()
    import torch

    return torch


# --- models --------------------------------------------------------------------------------


def decoder(torch, layers, d, heads, vocab):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def attend(self, x, cache):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).unbind(2)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))
            if cache is not None:
                # The growing KV cache as many inference loops keep it: a new tensor a token.
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
            causal = cache is None or t > 1
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

        def forward(self, x, cache=None):
            x = x + self.attend(x, cache)
            return x + self.down(F.gelu(self.up(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.checkpoint = False

        def forward(self, ids, caches=None):
            x = self.emb(ids)
            for i, blk in enumerate(self.blocks):
                if self.checkpoint and self.training:
                    x = torch.utils.checkpoint.checkpoint(blk, x, use_reentrant=False)
                else:
                    x = blk(x, None if caches is None else caches[i])
            return self.head(self.ln(x))

    return Model()


def cnn(torch):
    import torchvision

    return torchvision.models.resnet50(num_classes=100)


# --- workloads: each yields once a step ----------------------------------------------------


def next_token_steps(torch, rng, steps, model, opt, seq_range, tokens):
    """Trains `model` to predict the next token: each step a random length from `seq_range`
    (randrange's start, stop, step) and a batch of about `tokens` tokens; yields once a step."""
    for _ in range(steps):
        seq = rng.randrange(*seq_range)
        batch = max(1, tokens // seq)
        ids = torch.randint(0, 32000, (batch, seq + 1), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(ids[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield


def transformer_train(torch, rng, steps):
    model = decoder(torch, layers=12, d=1024, heads=16, vocab=32000).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    yield from next_token_steps(torch, rng, steps, model, opt, (128, 2049, 64), 16384)


def llm_decode(torch, rng, steps):
    model = decoder(torch, layers=16, d=1024, heads=16, vocab=32000).cuda().to(torch.bfloat16).eval()
    with torch.inference_mode():
        for _ in range(steps):
            batch, prompt, new = rng.randint(1, 32), rng.randint(32, 512), rng.randint(16, 128)
            ids = torch.randint(0, 32000, (batch, prompt), device="cuda")
            caches = [dict() for _ in model.blocks]
            logits = model(ids, caches)
            for _ in range(new):
                nxt = logits[:, -1:].argmax(-1)
                logits = model(nxt, caches)
            del caches, logits
            yield


def cnn_varsize(torch, rng, steps):
    model = cnn(torch).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for _ in range(steps):
        side = rng.randrange(128, 321, 32)
        batch = rng.choice((16, 32, 48, 64))
        x = torch.randn(batch, 3, side, side, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 100, (batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        yield


def finetune_checkpoint(torch, rng, steps):
    model = decoder(torch, layers=24, d=1024, heads=16, vocab=32000).cuda()
    model.checkpoint = True
    # Fine-tuning: the embedding and the lower half frozen, the rest trained.
    for p in list(model.emb.parameters()) + [p for b in model.blocks[:12] for p in b.parameters()]:
        p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    model.train()
    yield from next_token_steps(torch, rng, steps, model, opt, (256, 4097, 128), 32768)


RUNS = {
    "transformer-train": (transformer_train, 30),
    "llm-decode": (llm_decode, 4),
    "cnn-varsize": (cnn_varsize, 30),
    "finetune-checkpoint": (finetune_checkpoint, 20),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=WORKLOADS)
    ap.add_argument("--allocator", choices=("caching", "expandable", "emm"), required=True,
                    help="emm: emm.torch with the manager EMM_MEMORY_MANAGER names (pool by default)")
    ap.add_argument("--json", required=True)
    ap.add_argument("--trace")
    ap.add_argument("--steps", type=int)
    a = ap.parse_args()
    torch = setup(a.allocator)
    torch.manual_seed(0)
    rng = random.Random(20261128)
    fn, steps = RUNS[a.workload]
    steps = a.steps or steps
    free0, total = torch.cuda.mem_get_info()
    # The driver's view of the whole device every 20 ms, from outside the process (no GIL):
    # what any allocator holds at its peak, not only at the end of a step.
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-lms", "20"],
        stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    if a.trace:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=10_000_000)
    used_peak, step_s = 0, []
    torch.cuda.synchronize()
    t_all = time.perf_counter()
    t = t_all
    for _ in fn(torch, rng, steps):
        torch.cuda.synchronize()
        now = time.perf_counter()
        step_s.append(now - t)
        t = now
        free, _ = torch.cuda.mem_get_info()
        used_peak = max(used_peak, free0 - free)
    seconds = time.perf_counter() - t_all
    time.sleep(0.1)
    smi.terminate()
    polled = [int(x) for x in smi.communicate()[0].split() if x.strip().isdigit()]
    out = {
        "workload": a.workload,
        # A run recording its trace is slower: it stands apart from the allocator's own runs.
        "allocator": a.allocator + (" (recording its trace)" if a.trace else ""),
        "steps": steps,
        "seconds": seconds,
        # The first steps load kernels and fill pools: the median of the rest is the step time.
        "step_seconds_median": sorted(step_s[2:])[len(step_s[2:]) // 2] if len(step_s) > 2 else seconds,
        # Every step's time, in order, for the spread between runs and allocators.
        "step_seconds": step_s,
        "driver_used_peak_bytes": used_peak,
        # MiB, as nvidia-smi reads them: the first reading is before the workload's first tensor.
        "smi_used_mib_first": polled[0] if polled else None,
        "smi_used_mib_peak": max(polled) if polled else None,
        "smi_samples": len(polled),
        # Every reading, 20 ms apart: device memory used through the run, for the charts.
        "smi_used_mib_samples": polled,
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
    }
    if a.allocator == "emm":
        import emm

        dev = emm.stats()["devices"]
        d0 = dev[0] if isinstance(dev, list) else dev.get("0", dev)
        out["allocator"] = os.environ.get("EMM_MEMORY_MANAGER", "pool")
        # pool-vmm-tight's share of the host's time for moves, when set (else its default).
        out["move_share"] = os.environ.get("EMM_MOVE_SHARE")
        out["emm_stats"] = dev
        out["peak_live_bytes"] = d0.get("peak_bytes", d0.get("stats", {}).get("peak_bytes"))
    else:
        out["max_memory_reserved"] = torch.cuda.max_memory_reserved()
        out["peak_live_bytes"] = torch.cuda.max_memory_allocated()
    if a.trace:
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        out["trace_events"] = sum(len(t) for t in snap["device_traces"])
        opener = gzip.open if a.trace.endswith(".gz") else open
        with opener(a.trace, "wb") as f:
            pickle.dump(snap, f)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "emm_stats"}))


if __name__ == "__main__":
    sys.exit(main())
