"""A PyTorch workload — STEPS training steps of a small convolutional network on synthetic
data — with emm as PyTorch's allocator (CUDAPluggableAllocator) and with PyTorch's caching
allocator: the same losses and weights (deterministic algorithms, same seed) and the time ratio,
of the medians of ROUNDS runs of each mode, alternating.

usage: python3 torch_workload.py OUT_DIR            (both modes in fresh processes, compare)
       python3 torch_workload.py --mode emm|torch --json FILE
"""

import hashlib
import os
import sys
import time

STEPS = 300
ROUNDS = 5
BATCH = 128


def build(torch):
    nn = torch.nn
    return nn.Sequential(
        # Strided convolutions rather than pooling: max-pooling's backward pass has no
        # deterministic CUDA implementation, and the two runs must compare bitwise.
        nn.Conv2d(3, 32, 3, padding=1, stride=2), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, stride=2), nn.ReLU(),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 256), nn.ReLU(), nn.Linear(256, 10),
    )


def train(torch, steps):
    torch.manual_seed(0)
    model = build(torch).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    g = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for step in range(steps):
        # Varied batch sizes make the allocator's work varied too.
        n = BATCH - (step % 4) * 16
        x = torch.randn(n, 3, 32, 32, device="cuda", generator=g)
        y = torch.randint(0, 10, (n,), device="cuda", generator=g)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    torch.cuda.synchronize()
    weights = hashlib.sha256()
    for p in model.parameters():
        weights.update(p.detach().cpu().numpy().tobytes())
    return [float(v) for v in torch.stack(losses).cpu()], weights.hexdigest()


def one(mode, path):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common

    if mode == "emm":
        import emm.torch

        emm.torch.use_emm()  # before the first CUDA tensor
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    train(torch, 20)  # warm-up: kernels loaded, pools filled
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    losses, weights = train(torch, STEPS)
    seconds = time.perf_counter() - t0
    result = {"mode": mode, "steps": STEPS, "seconds": seconds, "losses": losses, "weights_sha256": weights,
              "final_loss": losses[-1], "mem_used_after": common.mem_used_bytes()}
    if mode == "emm":
        import emm

        result["emm_stats"] = emm.stats()
        emm.torch.check()
    else:
        result["torch_max_memory_reserved"] = torch.cuda.max_memory_reserved()
    common.write_json(path, result)


def median(xs):
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import common

    out = common.command_line(one)
    if out is None:
        return None
    # A run of 300 steps takes under a second, and two runs of one mode differ by up to 15 %:
    # the modes alternate, each in ROUNDS fresh processes, and the ratio is of the medians.
    rounds = []
    for _ in range(ROUNDS):
        rounds.append(common.run_modes(os.path.abspath(__file__), ["torch", "emm"], out))
    r = rounds[0]
    e, t = r.get("emm", {}), r.get("torch", {})
    summary = {"workload": "torch", "results": r}
    if "losses" in e and "losses" in t:
        summary["same_weights_bitwise"] = e["weights_sha256"] == t["weights_sha256"]
        summary["max_relative_loss_difference"] = common.max_rel_diff(e["losses"], t["losses"])
        summary["same_results"] = summary["same_weights_bitwise"] or summary["max_relative_loss_difference"] <= 1e-5
        summary["final_loss"] = {"emm": e["final_loss"], "torch": t["final_loss"]}
        seconds = {m: sorted(x[m]["seconds"] for x in rounds if "seconds" in x.get(m, {})) for m in ("emm", "torch")}
        summary["seconds"] = seconds
        summary["time_ratio_emm_over_torch"] = median(seconds["emm"]) / median(seconds["torch"])
    common.write_json(os.path.join(out, "torch.json"), summary)
    print({k: v for k, v in summary.items() if k != "results"})
    return 0 if summary.get("same_results") else 1


if __name__ == "__main__":
    sys.exit(main())
