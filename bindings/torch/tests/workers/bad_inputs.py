"""Bad inputs raise clear errors on the caller (naming the argument and value) before any
communication, so every rank stays in step and the group keeps working afterwards."""
import torch
import torch.distributed as dist

from common import init_world
from weft_torch import _C


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
        # A CUDA tensor while weft's device runtime is not "cuda" (no GPU here: "none"), through
        # the collectives' own check.
        expect(ValueError, ["all_reduce", "tensor[0] is on cuda:0",
                            f'device runtime is "{_C.device_runtime()}"', "WEFT_DEVICE=cuda"],
               lambda: backend.allreduce([fake_cuda_tensor()]).wait()),
        expect(ValueError, ["all_gather_into_tensor", "output is on cuda:0", "WEFT_DEVICE=cuda"],
               lambda: backend._allgather_base(fake_cuda_tensor(), torch.ones(3)).wait()),
        expect(ValueError, ["all_reduce", "meta", "handles CPU and CUDA tensors"],
               lambda: backend.allreduce([torch.empty(3, device="meta")]).wait()),
        # Mixed devices in one call, with the CUDA runtime present: the same check, given the
        # devices (no CUDA tensor can exist on a machine without a GPU).
        expect(ValueError, ["all_gather", "tensor_list[1] is on cpu", "tensor[0] is on cuda:0",
                            "same device"],
               lambda: _C._check_devices("all_gather", [("tensor[0]", torch.device("cuda:0")),
                                                        ("tensor_list[1]", torch.device("cpu"))],
                                         "cuda")),
        expect(ValueError, ["all_to_all", "input_tensor_list[0] is on cuda:1",
                            "output_tensor_list[0] is on cuda:0"],
               lambda: _C._check_devices("all_to_all",
                                         [("output_tensor_list[0]", torch.device("cuda:0")),
                                          ("input_tensor_list[0]", torch.device("cuda:1"))],
                                         "cuda")),
        expect(ValueError, ["reduce", "tensor[0] is on cuda:0", 'runtime is "emulated"',
                            "WEFT_DEVICE=cuda"],
               lambda: _C._check_devices("reduce", [("tensor[0]", torch.device("cuda:0"))],
                                         "emulated")),
    ]
    # CUDA tensors of one device under the CUDA runtime pass the check.
    _C._check_devices("all_reduce", [("a", torch.device("cuda:0")), ("b", torch.device("cuda:0"))],
                      "cuda")
    # One backend serves both devices of the group.
    assert dist.Backend.backend_capability["weft"] == ["cpu", "cuda"], \
        dist.Backend.backend_capability["weft"]
    assert sorted(d.type for d in dist.group.WORLD._device_types) == ["cpu", "cuda"]
    # The group still works.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((3,), float(size))), t
    if rank == 0:
        print("\n".join(msgs), flush=True)
    print(f"rank {rank}: bad inputs raised clear errors", flush=True)
    dist.destroy_process_group()
