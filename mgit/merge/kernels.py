"""Which kernel merges a chunk of a tensor, and the call into torch's.

A method may declare a torch-free array kernel (:meth:`MergeMethod.array_kernel`); the engine
uses it where :class:`Kernels` says it pays, and the method's torch kernel (:func:`merge_one`)
everywhere else, importing torch only then.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, cast

import numpy as np

from mgit.merge.methods.base import ArrayKernel, TensorCall
from mgit.merge.plan import MergePlan, TensorPlan
from mgit.merge.request import MergeSetup
from mgit.model.dtypes import DType, lookup
from mgit.model.torch_io import torch_dtype
from mgit.store.record import RawBytes

if TYPE_CHECKING:
    import torch

    from mgit.merge.methods.inputs import Prepared

# Expert chunk bytes a merge computes up to which its chunks use array kernels (see Kernels).
ARRAY_KERNEL_BYTES = 2 * 10**9


def torch_loaded() -> bool:
    """Whether this process has imported torch (then its kernels cost nothing more to use)."""
    return "torch" in sys.modules


def merge_one(
    tp: TensorPlan,
    setup: MergeSetup,
    base: torch.Tensor,
    experts: list[torch.Tensor],
    prepared: Prepared | None = None,
    start: int = 0,
    present: list[int] | None = None,
) -> torch.Tensor:
    """One tensor merged in memory; with ``prepared``, the slice of it starting at element ``start``
    (and with ``present``, ``experts`` are those experts only: the others equal the base there)."""
    import torch

    from mgit.merge.rng import tensor_generator

    method = setup.method
    with torch.no_grad():
        if prepared is not None:
            result = method.merge_slice(prepared, base if setup.merges_base else None, experts, start, present)
            return result.to(torch_dtype(setup.out_dtype)) if setup.out_dtype else result
        call = TensorCall(
            base=base if setup.merges_base else None,
            experts=experts,
            params=setup.tensor_params(tp.name),
            dtype=torch_dtype(setup.dtype) if setup.dtype else None,
            out_dtype=torch_dtype(setup.out_dtype) if setup.out_dtype else None,
            generator=tensor_generator(setup, tp.name),
            name=tp.name,
        )
        return method.merge_tensor(call)


class Kernels:
    """Which kernels a merge runs its chunks on, and torch's threads meanwhile.

    A method's array kernel (torch-free) costs more than torch's where few experts differ (task
    arithmetic, two threads, 4 MiB bf16 chunks: 1.4x torch's time at one expert, 1.5x at four, the
    same at sixteen): a merge that computes little is quicker without importing torch (~1.3 s
    warm, ~4 s cold), one that computes much is not (bench_scale, 2.2 GB, cold cache, in pairs:
    --budget 10% at K = 16 went from ~9.5 to ~6.5 s; with array kernels for every chunk the exact
    K = 8 merge took 24.0-24.5 s against 24.3-26.5 s, the exact K = 16 one 42.3-43.8 s against
    39.0-41.8 s, so the bound stays). So ``arrays`` holds for plans whose expert chunks to
    merge sum to at most ARRAY_KERNEL_BYTES, in a process that has not loaded torch already (a
    Python session merging tensors it made with torch gains nothing from avoiding it).

    torch is held to one thread of its own while chunks are merged on the pool's threads, one chunk
    each: its threads on top would only oversubscribe the cores (and the order of its sums over many
    experts depends on them). It is imported only when a chunk needs it (:meth:`need`).
    """

    def __init__(self, arrays: bool) -> None:
        self.arrays = arrays
        self._lock = threading.Lock()
        self._before: int | None = None

    @classmethod
    def for_plan(cls, plan: MergePlan) -> Kernels:
        merged = sum(tp.experts[k].chunks[i].size for tp in plan.tensors for k, r in enumerate(tp.reads) for i in r)
        return cls(arrays=merged <= ARRAY_KERNEL_BYTES and not torch_loaded())

    def need(self) -> None:
        with self._lock:
            if self._before is None:
                import torch

                self._before = torch.get_num_threads()
                torch.set_num_threads(1)

    def restore(self) -> None:
        with self._lock:
            if self._before is not None:
                import torch

                torch.set_num_threads(self._before)
                self._before = None


def chunk_bits(raw: RawBytes) -> np.ndarray:
    """A 16-bit chunk's elements as their bits (what array kernels take)."""
    return np.frombuffer(cast("bytes | memoryview", raw), np.uint16)


def array_kernel_for(tp: TensorPlan, setup: MergeSetup) -> ArrayKernel | None:
    """The method's array kernel for this tensor, when inputs, working dtype and result share a
    16-bit dtype (the kernels' element width)."""
    dtype = tp.base.dtype
    if cast(DType, lookup(dtype)).bits != 16 or (setup.dtype or dtype) != dtype or setup.result_dtype(dtype) != dtype:
        return None
    return setup.method.array_kernel(setup.resolved_params(tp.name), dtype)
