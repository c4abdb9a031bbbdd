"""On a world bound to a device: split_group goes through weftCommSplit (the world's split
count moves by one), new_group builds the members' communicator through the store (torch's
no-color split of the non-member is a no-op for weft, so the split count stays). Results are
checked in closed form."""
import os

import torch
import torch.distributed as dist

import weft_torch  # noqa: F401

if __name__ == "__main__":
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("weft", init_method="file://" + os.environ["WEFT_TEST_STORE"],
                            rank=rank, world_size=size, device_id=torch.device("cpu:0"))
    world = dist.group.WORLD._get_backend(torch.device("cpu"))
    sub = dist.split_group(split_ranks=[[0, 1], [2]])
    assert world.comm_split_count() == 1, world.comm_split_count()
    members = [0, 1] if rank < 2 else [2]
    assert dist.get_world_size(sub) == len(members)
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t, group=sub)
    assert torch.equal(t, torch.full((4,), float(sum(m + 1 for m in members)))), t
    ng = dist.new_group([0, 2])  # rank 1: torch calls perform_nocolor_split, a no-op for weft
    assert world.comm_split_count() == 1, "new_group split the world communicator"
    if rank in (0, 2):
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=ng)
        assert torch.equal(t, torch.full((4,), 4.0)), t
    dist.barrier()
    print(f"rank {rank}: split groups ok", flush=True)
    dist.destroy_process_group()
