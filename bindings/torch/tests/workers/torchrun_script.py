"""Launched by torchrun with backend="weft" and no weft import: the backend is found through
its torch.distributed.backends entry point; the communicator comes from torchrun's store."""
import os

import torch
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("weft")
    rank, size = dist.get_rank(), dist.get_world_size()
    assert int(os.environ["RANK"]) == rank
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), float(size * (size + 1) // 2))), t[:4]
    print(f"torchrun rank {rank}/{size}: all_reduce ok", flush=True)
    dist.destroy_process_group()
