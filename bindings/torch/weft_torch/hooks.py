"""DDP communication hooks that average gradient buckets with weft's compressed allreduce.

    from weft_torch import hooks
    state = hooks.CompressionState()                 # or CompressionState(codec="topk", ratio=0.01)
    model.register_comm_hook(state, hooks.int8_hook)   # fp8_hook, sign1_hook, topk_hook

Each bucket is averaged over the group by ``weftAllReduceCompressed``
(``include/weft/weft_compress.h``): every rank's contribution is encoded once, reduced in
float32 at the owner of each slice, the reduced slice encoded once and gathered, so every rank
gets bitwise-identical gradients. The call is queued on the weft backend's progress thread like
any asynchronous collective, so buckets still overlap backward; the hook returns the Work's
Future, completed with the bucket's tensor, as DDP's built-in hooks do.

Error feedback: the state keeps one float32 residual per bucket, keyed by the bucket's index
(as PowerSGD's state does). weft adds it to the bucket before encoding and stores back what the
encoding dropped, so the next step sends it: the running mean of the decoded gradients converges
to the true mean instead of keeping the codec's bias. DDP rebuilds its buckets after the first
iteration; a residual whose bucket changed (element count or parameter shapes) is reset to zero.

The hooks need a process group whose CPU backend is weft and float32 or bfloat16 gradients;
anything else raises a clear error naming what was found. Gradients may be CPU or CUDA tensors:
on CUDA the compressed allreduce is queued on the bucket's current stream (weft stages it
through pinned host memory itself: its codecs run on the host), and the residuals live on the
bucket's device.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["CompressionState", "compressed_hook", "int8_hook", "fp8_hook", "sign1_hook",
           "topk_hook", "compressed_all_reduce"]

_HOOK_CODECS = {"int8_hook": "int8", "fp8_hook": "fp8e4m3", "sign1_hook": "sign1",
                "topk_hook": "topk"}
_CODEC_ALIASES = {"fp8": "fp8e4m3", "1bit": "sign1"}


class CompressionState:
    """Settings and per-bucket residuals of the compression hooks.

    codec: a weft codec name ("int8", "fp8", "fp8e5m2", "int4", "sign1"/"1bit", "topk",
        "bf16", "fp16"), or None to take the codec of the hook it is registered with.
    process_group: the group DDP reduces over (None: the default group); its CPU backend
        must be weft.
    block, ratio, seed, stochastic, hadamard: weft's spec options (``weftCompressionParse``):
        values per scale, fraction kept by top-k, seed of stochastic rounding and of the
        Hadamard signs.
    error_feedback: keep a residual per bucket (default True).
    min_bytes: buckets smaller than this are averaged uncompressed (latency-bound anyway).

    Every rank must build the same state. Bad values raise ValueError/TypeError at once,
    naming the argument and the value (weft's parser checks the spec as the collective would).
    """

    def __init__(self, codec=None, process_group=None, *, block=128, ratio=0.01, seed=0,
                 stochastic=False, hadamard=False, error_feedback=True, min_bytes=0):
        _check_int("block", block, minimum=1)
        _check_int("seed", seed, minimum=0)
        _check_int("min_bytes", min_bytes, minimum=0)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or \
                not 0.0 < ratio <= 1.0:
            raise ValueError(f"CompressionState: ratio={ratio!r} must be a number in (0, 1] "
                             "(the fraction of elements top-k keeps)")
        for name, value in (("stochastic", stochastic), ("hadamard", hadamard),
                            ("error_feedback", error_feedback)):
            if not isinstance(value, bool):
                raise TypeError(f"CompressionState: {name}={value!r} must be True or False")
        if process_group is not None and not isinstance(process_group, dist.ProcessGroup):
            raise TypeError(f"CompressionState: process_group={process_group!r} is not a "
                            "torch.distributed ProcessGroup")
        self.process_group = process_group
        self.block, self.ratio, self.seed = block, float(ratio), seed
        self.stochastic, self.hadamard = stochastic, hadamard
        self.error_feedback, self.min_bytes = error_feedback, min_bytes
        self.codec, self.spec = None, None
        self.residuals = {}    # bucket index -> float32 residual
        self._signatures = {}  # bucket index -> (numel, parameter shapes) the residual is for
        self.resets = 0        # residuals dropped because their bucket changed
        if codec is not None:
            self._bind(codec, "CompressionState")

    def _bind(self, codec, who):
        """Fixes the codec (at construction, or by the first hook that runs with this state)."""
        if not isinstance(codec, str):
            raise TypeError(f"{who}: codec={codec!r} must be a string such as \"int8\"")
        codec = _CODEC_ALIASES.get(codec.lower(), codec.lower())
        if self.codec is not None:
            if codec != self.codec:
                raise ValueError(f"{who}: this CompressionState is bound to codec "
                                 f"{self.codec!r}; {who} needs {codec!r} (use one state per "
                                 "codec, or compressed_hook to use the state's codec)")
            return
        self.spec = self._parse(codec)
        self.codec = codec

    def _parse(self, codec):
        options = [f"block={self.block}", f"seed={self.seed}"]
        if codec == "topk":
            options.append(f"ratio={self.ratio!r}")
        if self.stochastic:
            options.append("stochastic")
        if self.hadamard:
            options.append("hadamard")
        text = f"{codec}:{','.join(options)}"
        try:
            return _C.CompressionSpec(text)
        except ValueError as err:
            raise ValueError(f"CompressionState: codec={codec!r} with block={self.block}, "
                             f"ratio={self.ratio}, stochastic={self.stochastic}, "
                             f"hadamard={self.hadamard} is refused by weft: {err}") from None

    def residual_for(self, key, tensor, signature=None):
        """The residual of bucket `key` (zeros the first time, or when the bucket changed)."""
        signature = (tensor.numel(), signature)
        residual = self.residuals.get(key)
        if residual is None or self._signatures.get(key) != signature:
            if residual is not None:
                self.resets += 1
            residual = torch.zeros(tensor.numel(), dtype=torch.float32, device=tensor.device)
            self.residuals[key] = residual
            self._signatures[key] = signature
        return residual

    def __repr__(self):
        return (f"CompressionState(codec={self.codec!r}, spec={self.spec!r}, "
                f"error_feedback={self.error_feedback}, buckets={len(self.residuals)})")


def _check_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"CompressionState: {name}={value!r} must be an integer")
    if value < minimum:
        raise ValueError(f"CompressionState: {name}={value} must be >= {minimum}")


def _weft_backend(group, who):
    pg = group if group is not None else dist.group.WORLD
    if pg is None:
        raise RuntimeError(f"{who}: torch.distributed is not initialized")
    try:
        backend = pg._get_backend(torch.device("cpu"))
    except RuntimeError as err:
        raise TypeError(f"{who}: the process group has no CPU backend ({err}); the "
                        "compression hooks need backend \"weft\"") from None
    if not isinstance(backend, _C.WeftBackend):
        raise TypeError(f"{who}: the process group's CPU backend is "
                        f"{dist.get_backend(pg)!r}, not \"weft\" (weft's compressed allreduce "
                        "runs only on weft communicators)")
    return backend


def compressed_all_reduce(tensor, state, key=0, signature=None, who="compressed_all_reduce"):
    """Averages `tensor` (float32/bfloat16, CPU or CUDA, contiguous) in place over state's group with
    state's codec, using the residual kept under `key`; returns a Future holding the tensor.
    What the hooks run per bucket; usable on its own (e.g. for a model's own gradient arena)."""
    if not isinstance(state, CompressionState):
        raise TypeError(f"{who}: state must be a weft_torch.hooks.CompressionState, got "
                        f"{type(state).__name__}")
    if state.spec is None:
        raise ValueError(f"{who}: the CompressionState has no codec: pass codec= or register "
                         "it with a codec's hook (int8_hook, ...)")
    if tensor.dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"{who}: gradients of dtype {tensor.dtype} cannot be compressed by "
                        "weft (float32 or bfloat16 only)")
    backend = _weft_backend(state.process_group, who)
    if tensor.numel() * tensor.element_size() < state.min_bytes:
        work = dist.all_reduce(tensor, op=dist.ReduceOp.AVG, group=state.process_group,
                               async_op=True)
    else:
        residual = state.residual_for(key, tensor, signature) if state.error_feedback else None
        work = backend.allreduce_compressed(tensor, state.spec, residual, True)
    return work.get_future().then(lambda fut: fut.value()[0])


def compressed_hook(state, bucket):
    """DDP comm hook with the codec of `state` (CompressionState(codec=...))."""
    return _run_hook(state, bucket, None, "compressed_hook")


def int8_hook(state, bucket):
    """DDP comm hook: int8 block quantization (1 B/element + 4 B per block of 128)."""
    return _run_hook(state, bucket, "int8", "int8_hook")


def fp8_hook(state, bucket):
    """DDP comm hook: fp8 e4m3 with a scale per block (1 B/element + 4 B per block)."""
    return _run_hook(state, bucket, "fp8e4m3", "fp8_hook")


def sign1_hook(state, bucket):
    """DDP comm hook: 1-bit sign with the block's mean magnitude (1 bit/element + 4 B per
    block); relies on error feedback to converge."""
    return _run_hook(state, bucket, "sign1", "sign1_hook")


def topk_hook(state, bucket):
    """DDP comm hook: top-k sparsification (state.ratio of the elements, 8 B each); the
    dropped ones wait in the residual."""
    return _run_hook(state, bucket, "topk", "topk_hook")


def _run_hook(state, bucket, codec, who):
    if not isinstance(state, CompressionState):
        raise TypeError(f"{who}: state must be a weft_torch.hooks.CompressionState, got "
                        f"{type(state).__name__} (register_comm_hook(CompressionState(), "
                        f"{who}))")
    if codec is not None:
        state._bind(codec, who)
    signature = tuple(tuple(p.shape) for p in bucket.parameters())
    return compressed_all_reduce(bucket.buffer(), state, bucket.index(), signature, who)
