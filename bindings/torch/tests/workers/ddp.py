"""DDP trains the same model 20 steps over weft and over gloo (same seed, same data); the
parameters must agree within 1e-6 relative. Buckets are small so that several allreduces
overlap backward on the weft progress thread, and a comm hook exercises the Work's Future."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from common import init_world


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def train(group, hook):
    model = DDP(make_model(), process_group=group, bucket_cap_mb=0.01)
    if hook:
        model.register_comm_hook(None, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + dist.get_rank())
    for _ in range(20):
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def allreduce_mean_hook(state, bucket):
    # What DDP's default hook does, through the Work's Future.
    t = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future().then(lambda fut: fut.value()[0])


if __name__ == "__main__":
    rank, size = init_world()
    gloo = dist.new_group(backend="gloo")
    reference = train(gloo, None)
    for hook in (None, allreduce_mean_hook):
        params = train(None, hook)
        for i, (p, q) in enumerate(zip(params, reference)):
            rel = ((p - q).abs().max() / q.abs().max().clamp_min(1e-30)).item()
            assert rel <= 1e-6, f"parameter {i}: relative difference {rel} (hook {hook})"
    print(f"rank {rank}: DDP parameters equal gloo's after 20 steps", flush=True)
    dist.destroy_process_group()
