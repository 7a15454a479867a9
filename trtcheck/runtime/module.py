"""``CompiledModule``: what ``trtcheck.compile`` returns, called like the model.

One code path runs a call (``CompiledModule.call``): the input check, then PyTorch's thread count, then the
stitched graph. ``forward`` and ``trtcheck.profile`` both go through it, so a profile times what users run.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.fx

from trtcheck.engines import Engine
from trtcheck.errors import TrtcheckError
from trtcheck.partitioning.partition import Partition
from trtcheck.runtime.signature import InputSignature
from trtcheck.runtime.stitch import EngineModule
from trtcheck.runtime.threads import TORCH_THREADS_AUTO, auto_torch_threads


class CompiledModule(torch.nn.Module):
    """What ``trtcheck.compile`` returns: called like the model, with the partition and engines at hand.

    Inputs are checked against the example inputs before anything runs (``InputSignature``); the
    stitched ``graph_module`` then runs engines and Torch segments in order and updates the model's
    mutable buffers (its own copies) as eager would.

    ``torch_threads``: PyTorch's thread count during a call (``torch.set_num_threads``, restored when the
    call returns or raises), or None to leave it alone; ``trtcheck.compile(torch_threads="auto")`` picks it
    (``auto_torch_threads``). It is PyTorch's process-wide setting: other threads running PyTorch at the
    same time see it too. Engines keep the threads they were built with.
    """

    def __init__(
        self,
        graph_module: torch.fx.GraphModule,
        signature: InputSignature,
        compile_times: Any,
        conversion: Any,
        torch_threads: int | str | None = None,
    ) -> None:
        super().__init__()
        self.graph_module = graph_module
        self.signature = signature
        self.compile_times = compile_times
        self.conversion = conversion  # the partition as made and the ONNX of each segment, before any fallback
        self.torch_threads = auto_torch_threads(graph_module) if torch_threads == TORCH_THREADS_AUTO else torch_threads

    def __deepcopy__(self, memo: dict[int, Any]) -> CompiledModule:
        """A copy with its own mutable state (buffers ``forward`` writes) that shares, read-only, what no call
        changes: the engines (thread-safe, immutable once built), the conversion and partitions as compiled,
        the input signature."""
        memo[id(self.conversion)] = self.conversion
        memo[id(self.signature)] = self.signature
        for module in self.graph_module.modules():
            partition = getattr(module, "partition", None)
            if partition is not None:
                memo[id(partition)] = partition
            if isinstance(module, EngineModule):
                memo[id(module.engine)] = module.engine
        copied = type(self).__new__(type(self))
        memo[id(self)] = copied
        copied.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return copied

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TrtcheckError(
            "a CompiledModule cannot be pickled (torch.save, multiprocessing): its engines are live ONNX Runtime "
            "sessions or TensorRT engines. Save what it was compiled from instead, e.g. "
            "torch.export.save(torch.export.export(model, example_inputs), 'model.pt2'), and compile that in the "
            "other process (trtcheck.compile(torch.export.load('model.pt2').module(), example_inputs)); TensorRT "
            "engines come from the engine cache there. copy.deepcopy(compiled) works in-process"
        )

    @property
    def partition(self) -> Partition:
        return self.graph_module.partition

    @property
    def engines(self) -> dict[int, Engine]:
        """The engine of every TensorRT segment, by segment index."""
        return {module.segment_index: module.engine for module in self.graph_module.children() if isinstance(module, EngineModule)}

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(self.graph_module, args, kwargs)

    def call(self, graph_module: torch.nn.Module, args: tuple, kwargs: dict) -> Any:
        """One call as ``forward`` makes it, running ``graph_module`` (the stitched graph, or an instrumented
        copy of it: ``trtcheck.profile``): inputs checked, then PyTorch's thread count set for the call."""
        checked = self.signature.check(args, kwargs)
        if checked is not None:
            args, kwargs = checked
        if self.torch_threads is None:
            return graph_module(*args, **kwargs)
        previous = torch.get_num_threads()
        if self.torch_threads == previous:
            return graph_module(*args, **kwargs)
        torch.set_num_threads(self.torch_threads)
        try:
            return graph_module(*args, **kwargs)
        finally:
            torch.set_num_threads(previous)
