"""weft as a torch.distributed backend: ``init_process_group("weft")`` for CPU and CUDA tensors
(CUDA tensors need weft's CUDA device runtime, WEFT_DEVICE=cuda; see README.md).

Importing this package registers the backend; the package's entry point does the same for
scripts that never import it (``torch.distributed`` looks up ``torch.distributed.backends``
entry points for unknown backend names), so ``torchrun`` scripts work unchanged.
"""
from datetime import timedelta

import torch.distributed as dist

from . import _C

__all__ = ["register", "WeftBackend", "last_algorithm", "hooks"]

WeftBackend = _C.WeftBackend


def _create_backend(store, rank, size, timeout):
    # The unique id (root address, port, 128-bit secret) travels through this store; weft's
    # root still opens its own listener on an ephemeral port of rank 0's host.
    if not isinstance(timeout, timedelta):
        timeout = timedelta(seconds=float(timeout))
    return _C.WeftBackend(store, rank, size, timeout)


def _nocolor_split_not_needed(self, device=None):
    """torch's new_group calls this on non-members of a group whose parent supports
    splitting, but (non-extended creator API) the members build their communicator through
    the store, not by splitting the parent: a weftCommSplit here would wait forever for
    members that never call it. Nothing to do."""


WeftBackend.perform_nocolor_split = _nocolor_split_not_needed


def register():
    """Registers backend "weft" for CPU and CUDA tensors (idempotent). One backend object
    serves both devices of a group (torch registers a single backend when every device maps to
    the same name), so CPU and CUDA calls share one communicator and one order."""
    if "WEFT" in dist.Backend._plugins:
        return
    dist.Backend.register_backend("weft", _create_backend, devices=["cpu", "cuda"])


def last_algorithm(group=None):
    """The algorithm weft ran for the last collective of ``group`` (default: the world)."""
    import torch
    pg = group if group is not None else dist.group.WORLD
    return pg._get_backend(torch.device("cpu")).last_algorithm()


register()

from . import hooks  # noqa: E402  (DDP compression hooks; needs _C and the registration)
