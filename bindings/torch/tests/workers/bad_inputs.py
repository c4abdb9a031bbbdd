"""Bad inputs raise clear errors on the caller (naming the argument and value) before any
communication, so every rank stays in step and the group keeps working afterwards."""
import torch
import torch.distributed as dist

from common import init_world


def expect(exc_type, words, fn):
    try:
        fn()
    except exc_type as err:
        for w in words:
            assert w in str(err), f"{w!r} not in error message: {err}"
        return str(err).splitlines()[0]
    raise AssertionError(f"no {exc_type.__name__} for {words}")


def fake_cuda_tensor():
    """A tensor whose device is cuda:0 without a GPU (FakeTensorMode: metadata only), so the
    CUDA refusal is tested on every machine; weft never touches its (absent) storage."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        return torch.empty(3, device="cuda")


def _broadcast_options(root):
    from torch._C._distributed_c10d import BroadcastOptions
    opts = BroadcastOptions()
    opts.rootRank = root
    return opts


if __name__ == "__main__":
    rank, size = init_world()
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    msgs = [
        expect(ValueError, ["all_gather_into_tensor", "output has 5 elements"],
               lambda: dist.all_gather_into_tensor(torch.empty(5), torch.ones(4))),
        expect(ValueError, ["reduce_scatter_tensor", "input has 7 elements"],
               lambda: dist.reduce_scatter_tensor(torch.empty(2), torch.ones(7))),
        expect(ValueError, ["all_to_all_single", "input_split_sizes sum to"],
               lambda: dist.all_to_all_single(torch.empty(4), torch.ones(4),
                                              [2] * size, [3] * size)),
        # Uneven lists are legal (weftAllGatherV); this rank's own block must match its input,
        # and every rank here gets it wrong, so every rank refuses before any exchange. (A
        # list wrong on one rank only is that rank's error; its peers wait for it, as in NCCL.)
        expect(ValueError, ["all_gather", f"tensor_list[{rank}] (this rank's block)", "elements"],
               lambda: dist.all_gather([torch.empty(2)] * size, torch.ones(3))),
        expect(TypeError, ["all_reduce", "Float8_e4m3fn", "not supported"],
               lambda: dist.all_reduce(torch.zeros(4).to(torch.float8_e4m3fn))),
        expect(TypeError, ["all_reduce", "Bool"], lambda: dist.all_reduce(torch.ones(3).bool())),
        expect(ValueError, ["all_reduce", "bitwise"],
               lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64), op=dist.ReduceOp.BAND)),
        expect(ValueError, ["broadcast", "root rank 7"],
               lambda: backend.broadcast([torch.ones(3)], _broadcast_options(7)).wait()),
        expect(ValueError, ["all_reduce", "cuda:0", "CPU tensors only until weft's GPU path",
                            "cpu:weft,cuda:nccl"],
               lambda: backend.allreduce([fake_cuda_tensor()]).wait()),
        expect(ValueError, ["all_gather_into_tensor", "cuda:0", "CPU tensors only"],
               lambda: backend._allgather_base(fake_cuda_tensor(), torch.ones(3)).wait()),
        expect(ValueError, ["all_reduce", "meta", "CPU tensors only"],
               lambda: backend.allreduce([torch.empty(3, device="meta")]).wait()),
    ]
    # The group still works.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(size))), t
    if rank == 0:
        print("\n".join(msgs), flush=True)
    print(f"rank {rank}: bad inputs raised clear errors", flush=True)
    dist.destroy_process_group()
