#!/usr/bin/env python3
"""twin.py: the PyTorch twin of the C++ MoE trainer (same model, same routing rules, same
AdamW/clipping/schedule), used three ways:

  python twin.py --write-golden DIR   writes the golden files the C++ golden test compares
                                      against (CI needs no torch):
                                      golden_softmax.bin, golden_sigmoid.bin: a tiny config's
                                        weights, one batch, logits, loss, every gradient and the
                                        losses of 10 optimizer steps on that batch
                                      golden_default.bin: the default config (moe_train's
                                        shape) with moe_train's own initial weights (replayed
                                        from the seed, not stored), 5 steps of 4 sequences, each
                                        step its own batch: the batches, a sample of the initial
                                        weights, the step-0 gradients at up to 2048 evenly spaced
                                        elements of every tensor, and the 5 losses
  python twin.py --replay             trains exactly what moe_train trains: the same initial
                                      weights (rng.h's counter-based normals, ported) and the
                                      same batches (data.cc's fortunes split and windows,
                                      ported) for --steps steps; --loss-file writes moe_train's
                                      loss-file format, so the runs compare line by line
  python twin.py --bench --threads N  trains the default config for a few steps on random
                                      fortune windows and prints tokens/s (the throughput
                                      baseline the C++ trainer is measured against)

Autograd computes the gradients here; the C++ side has hand-written backward passes.
"""
import argparse
import math
import os
import struct
import sys
import time

import numpy as np
import torch

from fortunes import fortunes_split  # data.cc's corpus split, shared with ngram_baseline.py

# ---------------------------------------------------------------- config


def tiny_config(router):
    return dict(vocab=256, dim=16, layers=2, heads=2, seq_len=8, experts=4, top_k=2,
                expert_hidden=8, shared_experts=1, router=router,
                capacity_factor=1.0 if router == "softmax" else 0.0,
                aux_loss=1e-2, z_loss=1e-3, bias_gamma=1e-2, rope_base=10000.0,
                norm_eps=1e-5, batch=2, steps=10, warmup=3, lr=1e-2, min_lr_ratio=0.1,
                weight_decay=0.1, grad_clip=1.0, beta1=0.9, beta2=0.95, eps=1e-8)


def default_config():
    return dict(vocab=256, dim=128, layers=4, heads=4, seq_len=128, experts=8, top_k=2,
                expert_hidden=128, shared_experts=1, router="softmax", capacity_factor=0.0,
                aux_loss=1e-2, z_loss=1e-3, bias_gamma=1e-3, rope_base=10000.0,
                norm_eps=1e-5, batch=16, steps=400, warmup=40, lr=3e-3, min_lr_ratio=0.1,
                weight_decay=0.1, grad_clip=1.0, beta1=0.9, beta2=0.95, eps=1e-8)


def capacity(c):
    if c["capacity_factor"] <= 0:
        return 0
    return math.ceil(c["capacity_factor"] * c["seq_len"] * c["top_k"] / c["experts"])

# ---------------------------------------------------------------- moe_train's randomness
# rng.h and data.cc ported: every value a pure function of (seed, stream, index), so the twin
# starts from moe_train's weights and reads its batches without any file between them.

MASK = (1 << 64) - 1


def mix64(x):  # SplitMix64 finalizer on a numpy uint64 array (wrapping arithmetic)
    x = x + np.uint64(0x9e3779b97f4a7c15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
    return x ^ (x >> np.uint64(31))


def hash_string(s):
    h = 1469598103934665603
    for ch in s.encode():
        h = ((h ^ ch) * 1099511628211) & MASK
    return int(mix64(np.array([h], dtype=np.uint64))[0])


def uniform_open(seed, stream, index):  # index: uint64 array; float64 in (0, 1)
    with np.errstate(over="ignore"):
        bits = mix64(np.uint64(seed) ^ mix64(np.uint64(stream) ^ mix64(index)))
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / 9007199254740992.0)


def normal(seed, stream, count):  # Box-Muller, float64, indices 0..count-1
    index = np.arange(count, dtype=np.uint64)
    u1 = uniform_open(seed, stream, np.uint64(2) * index)
    u2 = uniform_open(seed, stream, np.uint64(2) * index + np.uint64(1))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)


def replay_params(c, seed):
    """params.cc's InitParams on one rank: norms 1, the rest std * Normal(seed, stream, i) with
    one stream per tensor (per expert for expert tensors), cast to float32 as the C++ does."""
    params = {}
    std = np.float32(0.02)
    out_std = np.float32(0.02) / np.sqrt(np.float32(2.0) * np.float32(c["layers"]))
    for name, shape in param_shapes(c):
        if name.endswith("norm"):
            w = np.ones(shape, dtype=np.float32)
        else:
            s = float(out_std if name.endswith(("wo", "w2")) else std)
            if name.split(".")[-1].startswith("expert_"):
                per = int(np.prod(shape[1:]))
                w = np.stack([(s * normal(seed, hash_string("%s#%d" % (name, e)), per))
                              .astype(np.float32).reshape(shape[1:]) for e in range(shape[0])])
            else:
                w = (s * normal(seed, hash_string(name), int(np.prod(shape)))).astype(np.float32)
                w = w.reshape(shape)
        params[name] = torch.from_numpy(w).requires_grad_(True)
    return params


def replay_batch(text, seed, step, batch, seq_len):
    """data.cc's TrainSequences for the whole global batch of `step`: inputs, targets [B, T]."""
    positions = len(text) - seq_len - 1
    index = np.uint64(step * batch) + np.arange(batch, dtype=np.uint64)
    starts = (uniform_open(seed, hash_string("train"), index) * positions).astype(np.int64)
    raw = np.frombuffer(text, dtype=np.uint8)
    window = np.stack([raw[s:s + seq_len + 1] for s in starts]).astype(np.int64)
    return torch.from_numpy(window[:, :-1].copy()), torch.from_numpy(window[:, 1:].copy())

# ---------------------------------------------------------------- parameters


def param_shapes(c):
    C, F, E, V = c["dim"], c["expert_hidden"], c["experts"], c["vocab"]
    Fs = c["shared_experts"] * F
    shapes = [("embed", (V, C))]
    for l in range(c["layers"]):
        p = f"l{l}."
        shapes += [(p + "attn_norm", (C,)), (p + "wqkv", (C, 3 * C)), (p + "wo", (C, C)),
                   (p + "moe_norm", (C,)), (p + "router", (C, E))]
        if Fs > 0:
            shapes += [(p + "shared_w1", (C, Fs)), (p + "shared_w3", (C, Fs)),
                       (p + "shared_w2", (Fs, C))]
        shapes += [(p + "expert_w1", (E, C, F)), (p + "expert_w3", (E, C, F)),
                   (p + "expert_w2", (E, F, C))]
    shapes += [("final_norm", (C,)), ("lm_head", (C, V))]
    return shapes


def init_params(c, generator, golden):
    params = {}
    out_std = 0.02 / math.sqrt(2 * c["layers"])
    for name, shape in param_shapes(c):
        if name.endswith("norm"):
            # Golden: norm weights away from 1 so their gradients are checked meaningfully.
            w = torch.ones(shape) + (0.1 * torch.randn(shape, generator=generator) if golden else 0)
        elif name.endswith("router") and golden:
            w = 0.5 * torch.randn(shape, generator=generator)  # decisive routing, no near-ties
        else:
            std = out_std if name.endswith(("wo", "w2")) else 0.02
            if golden:
                std = 0.2  # larger activations: every path carries signal in the tiny model
            w = std * torch.randn(shape, generator=generator)
        params[name] = w.float().requires_grad_(True)
    return params

# ---------------------------------------------------------------- model


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_tables(c):
    hd = c["dim"] // c["heads"]
    half = hd // 2
    pos = torch.arange(c["seq_len"], dtype=torch.float64)[:, None]
    freq = torch.pow(torch.tensor(c["rope_base"], dtype=torch.float64),
                     -2.0 * torch.arange(half, dtype=torch.float64) / hd)[None, :]
    angle = pos * freq
    return torch.cos(angle).float(), torch.sin(angle).float()


def rope(x, cos, sin):  # x: [B, T, H, hd], rotate-half pairing (i, i + hd/2)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def attention(x, wqkv, wo, c, cos, sin):
    B, T, C = x.shape
    H = c["heads"]
    hd = C // H
    q, k, v = (x @ wqkv).split(C, dim=-1)
    q = rope(q.view(B, T, H, hd), cos, sin).transpose(1, 2)
    k = rope(k.view(B, T, H, hd), cos, sin).transpose(1, 2)
    v = v.view(B, T, H, hd).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    probs = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    y = (probs @ v).transpose(1, 2).reshape(B, T, C)
    return y @ wo


def swiglu(x, w1, w3, w2):
    return (torch.nn.functional.silu(x @ w1) * (x @ w3)) @ w2


def route(logits, bias, c, global_batch):
    """Returns choice [B,T,k], gate [B,T,k] (0 when dropped), counts [E], aux, z."""
    B, T, E = logits.shape
    k = c["top_k"]
    if c["router"] == "softmax":
        probs = torch.softmax(logits, dim=-1)
        chosen, choice = torch.topk(probs, k, dim=-1)
        gate = chosen
    else:
        scores = torch.sigmoid(logits)
        _, choice = torch.topk(scores + bias, k, dim=-1)
        chosen = scores.gather(-1, choice)
        gate = chosen / chosen.sum(-1, keepdim=True)
    onehot = torch.nn.functional.one_hot(choice.reshape(B, T * k), E)  # [B, T*k, E]
    cap = capacity(c)
    if cap > 0:  # per sequence, in token order then choice order
        position = (onehot.cumsum(dim=1) * onehot).sum(-1) - 1  # [B, T*k]
        kept = (position < cap).reshape(B, T, k)
        gate = gate * kept
    else:
        kept = torch.ones_like(choice, dtype=torch.bool)
    counts = onehot.sum(dim=(0, 1)).double()
    aux = logits.new_zeros(())
    z = logits.new_zeros(())
    if c["router"] == "softmax":
        P = probs.sum(dim=1)               # [B, E]
        f = onehot.sum(dim=1).float()      # [B, E]
        aux = c["aux_loss"] * E / (T * T * k) * (P * f).sum() / global_batch
        lse = torch.logsumexp(logits, dim=-1)
        z = c["z_loss"] * (lse * lse).sum() / (global_batch * T)
    return choice, gate, kept, counts, aux, z


def moe(x, p, prefix, bias, c, global_batch):
    B, T, C = x.shape
    logits = x @ p[prefix + "router"]
    choice, gate, kept, counts, aux, z = route(logits, bias, c, global_batch)
    flat = x.reshape(B * T, C)
    out = torch.zeros_like(flat)
    if c["shared_experts"] > 0:
        out = out + swiglu(flat, p[prefix + "shared_w1"], p[prefix + "shared_w3"],
                           p[prefix + "shared_w2"])
    choice_f, gate_f, kept_f = (t.reshape(B * T, -1) for t in (choice, gate, kept))
    for e in range(c["experts"]):
        token, slot = torch.nonzero((choice_f == e) & kept_f, as_tuple=True)
        if token.numel() == 0:
            continue
        y = swiglu(flat[token], p[prefix + "expert_w1"][e], p[prefix + "expert_w3"][e],
                   p[prefix + "expert_w2"][e])
        out = out.index_add(0, token, y * gate_f[token, slot].unsqueeze(-1))
    return out.view(B, T, C), counts, aux, z


def forward(p, biases, inputs, targets, c, tables):
    cos, sin = tables
    x = p["embed"][inputs]
    aux_total, z_total, all_counts = 0.0, 0.0, []
    for l in range(c["layers"]):
        pre = f"l{l}."
        x = x + attention(rmsnorm(x, p[pre + "attn_norm"], c["norm_eps"]), p[pre + "wqkv"],
                          p[pre + "wo"], c, cos, sin)
        y, counts, aux, z = moe(rmsnorm(x, p[pre + "moe_norm"], c["norm_eps"]), p, pre,
                                biases[l], c, inputs.shape[0])
        x = x + y
        aux_total = aux_total + aux
        z_total = z_total + z
        all_counts.append(counts)
    logits = rmsnorm(x, p["final_norm"], c["norm_eps"]) @ p["lm_head"]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, c["vocab"]), targets.reshape(-1))
    return logits, ce + aux_total + z_total, ce, all_counts

# ---------------------------------------------------------------- training


def learning_rate(c, step):
    if step < c["warmup"]:
        return c["lr"] * (step + 1) / c["warmup"]
    progress = min(1.0, (step - c["warmup"]) / max(1, c["steps"] - c["warmup"]))
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return c["lr"] * (c["min_lr_ratio"] + (1.0 - c["min_lr_ratio"]) * cosine)


def make_optimizer(p, c):
    decay = [t for n, t in p.items() if not n.endswith("norm")]
    no_decay = [t for n, t in p.items() if n.endswith("norm")]
    return torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"],
                             foreach=False)


def train_step(p, biases, opt, inputs, targets, c, tables, step):
    opt.zero_grad(set_to_none=False)
    logits, loss, ce, counts = forward(p, biases, inputs, targets, c, tables)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(p.values()), c["grad_clip"], foreach=False)
    for group in opt.param_groups:
        group["lr"] = learning_rate(c, step)
    opt.step()
    if c["router"] == "sigmoid":  # aux-loss-free balancing: bias only steers selection
        mean = inputs.numel() * c["top_k"] / c["experts"]
        for l in range(c["layers"]):
            biases[l] += c["bias_gamma"] * torch.sign(mean - counts[l]).float()
    return logits, loss, ce

# ---------------------------------------------------------------- golden file


def write_tensor(f, name, t):
    t = t.detach().contiguous().float()
    f.write(("tensor %s %d %s\n" % (name, t.dim(), " ".join(str(d) for d in t.shape))).encode())
    f.write(t.numpy().astype("<f4").tobytes())


def write_header(f, c):
    f.write(b"moe-golden 1\n")
    for key, value in c.items():
        f.write(("config %s %s\n" % (key, value)).encode())


def write_golden(path, router):
    c = tiny_config(router)
    g = torch.Generator().manual_seed(1234 if router == "softmax" else 4321)
    p = init_params(c, g, golden=True)
    inputs = torch.randint(0, 256, (c["batch"], c["seq_len"]), generator=g)
    targets = torch.randint(0, 256, (c["batch"], c["seq_len"]), generator=g)
    biases = [torch.zeros(c["experts"]) for _ in range(c["layers"])]
    tables = rope_tables(c)
    with open(path, "wb") as f:
        write_header(f, c)
        for name, t in p.items():
            write_tensor(f, "param." + name, t)
        write_tensor(f, "inputs", inputs.float())
        write_tensor(f, "targets", targets.float())
        logits, loss, _, _ = forward(p, biases, inputs, targets, c, tables)
        loss.backward()
        write_tensor(f, "logits", logits)
        write_tensor(f, "loss", loss.reshape(1))
        for name, t in p.items():
            write_tensor(f, "grad." + name, t.grad)
        opt = make_optimizer(p, c)
        losses = []
        for step in range(c["steps"]):
            _, loss, _ = train_step(p, biases, opt, inputs, targets, c, tables, step)
            losses.append(loss.item())
        write_tensor(f, "losses", torch.tensor(losses))
        f.write(b"end\n")
    print("wrote %s (%s router, %d bytes); losses %s" %
          (path, router, os.path.getsize(path), " ".join("%.6f" % x for x in losses)))

GOLDEN_SAMPLE = 2048  # elements compared per tensor in golden_default.bin (all of smaller ones)


def sample_indices(numel):
    """Evenly spaced elements of a flattened tensor, i * numel // GOLDEN_SAMPLE (golden_test.cc
    computes the same): all of it when small."""
    if numel <= GOLDEN_SAMPLE:
        return torch.arange(numel)
    return torch.div(torch.arange(GOLDEN_SAMPLE) * numel, GOLDEN_SAMPLE, rounding_mode="floor")


def replay_config(name, steps, warmup, batch, seed):
    c = default_config() if name == "default" else tiny_replay_config()
    c.update(steps=steps, warmup=warmup, seed=seed)
    if batch:
        c["batch"] = batch
    return c


def tiny_replay_config():  # config.cc's "tiny" preset (not tiny_config(): that one is golden's)
    c = default_config()
    c.update(dim=32, layers=2, heads=4, seq_len=32, experts=8, top_k=2, expert_hidden=16,
             shared_experts=1, batch=8, steps=20, warmup=5, lr=1e-2)
    return c


def write_golden_default(path, data_dir):
    """moe_train --config default --batch 4 --steps 5 --warmup 2 on one rank, step by step."""
    c = replay_config("default", steps=5, warmup=2, batch=4, seed=1337)
    p = replay_params(c, c["seed"])
    train_text, _ = fortunes_split(data_dir)
    batches = [replay_batch(train_text, c["seed"], s, c["batch"], c["seq_len"])
               for s in range(c["steps"])]
    biases = [torch.zeros(c["experts"]) for _ in range(c["layers"])]
    tables = rope_tables(c)
    with open(path, "wb") as f:
        # replay: the weights come from the seed (rng.h), not from this file
        write_header(f, dict(c, replay=1, golden_sample=GOLDEN_SAMPLE))
        for name, t in p.items():  # the twin's copy of moe_train's weights, sampled
            write_tensor(f, "param." + name, t.detach().reshape(-1)[sample_indices(t.numel())])
        for step, (inputs, targets) in enumerate(batches):
            write_tensor(f, "inputs.%d" % step, inputs.float())
            write_tensor(f, "targets.%d" % step, targets.float())
        _, loss, _, _ = forward(p, biases, batches[0][0], batches[0][1], c, tables)
        loss.backward()
        for name, t in p.items():
            write_tensor(f, "grad." + name, t.grad.reshape(-1)[sample_indices(t.numel())])
        opt = make_optimizer(p, c)
        losses = []
        for step, (inputs, targets) in enumerate(batches):
            _, loss, _ = train_step(p, biases, opt, inputs, targets, c, tables, step)
            losses.append(loss.item())
        write_tensor(f, "losses", torch.tensor(losses))
        f.write(b"end\n")
    print("wrote %s (default config, %d bytes); losses %s" %
          (path, os.path.getsize(path), " ".join("%.6f" % x for x in losses)))


def replay(args):
    """The run `moe_train --config C --steps S --warmup W [--batch B] --seed X` trains, on one
    rank: the same weights and batches; per-step losses in moe_train's loss-file format."""
    torch.set_num_threads(args.threads)
    c = replay_config(args.config, args.steps, args.warmup, args.batch, args.seed)
    c["router"] = args.router
    p = replay_params(c, c["seed"])
    train_text, _ = fortunes_split(args.data)
    biases = [torch.zeros(c["experts"]) for _ in range(c["layers"])]
    opt = make_optimizer(p, c)
    tables = rope_tables(c)
    out = open(args.loss_file, "w") if args.loss_file else None
    start = time.perf_counter()
    for step in range(c["steps"]):
        inputs, targets = replay_batch(train_text, c["seed"], step, c["batch"], c["seq_len"])
        _, loss, ce = train_step(p, biases, opt, inputs, targets, c, tables, step)
        line = "train %d %.17g %.17g" % (step, loss.item(), ce.item())
        print(line, flush=True)
        if out:
            out.write(line + "\n")
    if out:
        out.close()
    print("twin replay: %d steps in %.1f s" % (c["steps"], time.perf_counter() - start))

# ---------------------------------------------------------------- benchmark


def load_fortunes(directory):
    text = bytearray()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name.endswith((".dat", ".u8")) or os.path.islink(path) or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            text += f.read()
    return torch.tensor(list(text), dtype=torch.long)


def bench(args):
    torch.set_num_threads(args.threads)
    c = default_config()
    c["router"] = args.router
    g = torch.Generator().manual_seed(0)
    p = init_params(c, g, golden=False)
    biases = [torch.zeros(c["experts"]) for _ in range(c["layers"])]
    opt = make_optimizer(p, c)
    tables = rope_tables(c)
    text = load_fortunes(args.data)
    T, B = c["seq_len"], c["batch"]
    timed, start, cpu_start = 0, None, None
    for step in range(args.steps + args.warmup_steps):
        if step == args.warmup_steps:
            start = time.perf_counter()
            cpu_start = time.process_time()  # all threads; see train.cc's tok/CPU-s
        starts = torch.randint(0, len(text) - T - 1, (B,), generator=g)
        window = torch.stack([text[s:s + T + 1] for s in starts.tolist()])
        _, loss, _ = train_step(p, biases, opt, window[:, :-1], window[:, 1:], c, tables, step)
        if step >= args.warmup_steps:
            timed += 1
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_start
    print("twin bench: router=%s threads=%d steps=%d tokens/s=%.0f tokens/CPU-s=%.0f ms/step=%.1f "
          "final loss=%.4f" % (args.router, args.threads, timed, timed * B * T / elapsed,
                               timed * B * T / cpu, 1000 * elapsed / timed, loss.item()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--write-golden", metavar="DIR")
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--replay", action="store_true")
    ap.add_argument("--config", default="default", choices=["default", "tiny"])
    ap.add_argument("--warmup", type=int, default=5, help="--replay: warm-up steps (moe_train's)")
    ap.add_argument("--batch", type=int, default=0, help="--replay: global batch (0: the config's)")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--loss-file")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup-steps", type=int, default=3)
    ap.add_argument("--router", default="softmax", choices=["softmax", "sigmoid"])
    ap.add_argument("--data", default="/usr/share/games/fortunes")
    args = ap.parse_args()
    if args.write_golden:
        torch.set_num_threads(args.threads)  # --threads 1 (default): the same bytes every time
        for router in ("softmax", "sigmoid"):
            write_golden(os.path.join(args.write_golden, "golden_%s.bin" % router), router)
        write_golden_default(os.path.join(args.write_golden, "golden_default.bin"), args.data)
    elif args.replay:
        replay(args)
    elif args.bench:
        bench(args)
    else:
        ap.print_help()
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
