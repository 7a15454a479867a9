"""A lowered graph to a file and back: ``save_graph_module`` and ``load_graph_module``.

A ``torch.fx.GraphModule`` as lowering left it is what every later phase reads, and a file of one is how a
lowered graph travels to another process (a repro folder's ``model.pt`` and ``subgraph.pt``). Nothing here
knows what the graph will be used for; it is the format of a lowered graph, so it lives with lowering.

Why not plain ``torch.save(graph_module)``: the ``GraphModule`` of ``torch.export(...).module()`` does not pickle
at all (it holds a local lambda), and an ordinary ``GraphModule`` pickles as its *Python code*, which is
re-traced on load: the node metadata is lost (``nn_module_stack``, which ``torch_executed_modules`` matches, and
``meta["val"]``, the shapes and dtypes partitioning reads), and the pytree input flattening is re-traced into the
graph (an input ``d["z"]`` becomes a ``getitem`` node). A graph that partitions differently after loading is not
the graph that was saved. So the file holds the graph itself: each node's op, name, target (an ATen op by its
name: ``OpOverload``s do not pickle), args and kwargs; its ``nn_module_stack`` and ``stack_trace``; its
``meta["val"]`` as shape, stride, dtype and device, rebuilt as fake tensors on load; the graph's code generator
(which keeps the pytree in/out specs, so the loaded module takes and returns the same structures); and the
parameters, buffers, constants and submodules its nodes use. The pickle's reducer is ``_rebuild_graph_module``
in this module, so loading needs trtcheck importable. A symbolic (dynamic) shape is not stored: that node's
``meta["val"]`` is left out, and lowering recomputes it from the inputs.

A file names the format's classes by their import path; ``load_graph_module`` also reads files that name them
at their former path, ``trtcheck.verification.repro``, where the format was kept before it moved here.
"""

from __future__ import annotations

import importlib
import os
import pickle
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode

from trtcheck.atomic import atomic_write

FORMAT = 1


def save_graph_module(graph_module: torch.fx.GraphModule, path: str | os.PathLike) -> None:
    """``torch.save`` ``graph_module`` to ``path`` (atomically) as its nodes, code generator and state, not as its
    class: a GraphModule pickles by its generated code's module, which the loading process does not have, so the
    file loads with trtcheck alone, without the model's code."""
    saved = _SavedGraphModule(graph_module)
    atomic_write(path, lambda file: torch.save(saved, file))


def load_graph_module(path: str | os.PathLike) -> torch.fx.GraphModule:
    """The ``GraphModule`` ``save_graph_module`` wrote to ``path``: ``torch.load`` of it, reading a file that names
    this format's classes at their former path as well (``_FormerPaths``)."""
    return torch.load(path, weights_only=False, pickle_module=_FormerPaths)


# The names a saved file refers to in this module (the reducer and the references it is given), and the modules
# that held them before: a file written there names them there.
_PICKLED = frozenset({"_rebuild_graph_module", "_SavedGraphModule", "_NodeRef", "_OpRef", "_GlobalRef", "_MemoryFormatRef",
                      "_ValueRef"})
_FORMER_MODULES = frozenset({"trtcheck.verification.repro"})


class _FormerPaths:
    """The ``pickle_module`` ``load_graph_module`` gives ``torch.load``: ``pickle``, with this format's names found
    here when the file names them at a former module."""

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module in _FORMER_MODULES and name in _PICKLED:
                module = __name__
            return super().find_class(module, name)

    @staticmethod
    def load(file: Any, **kwargs: Any) -> Any:  # torch.load's legacy (non-zip) format reads with it
        return _FormerPaths.Unpickler(file, **kwargs).load()


class _NodeRef:
    """An argument that is another node's value, by that node's name."""

    def __init__(self, name: str) -> None:
        self.name = name


class _OpRef:
    """An ``OpOverload``/``OpOverloadPacket`` or a higher-order op (``torch.cond``: unpicklable) by its qualified name."""

    def __init__(self, op: torch._ops.OpOverload | torch._ops.OpOverloadPacket | torch._ops.HigherOrderOperator) -> None:
        self.name = f"{op.namespace}.{op.name()}" if isinstance(op, torch._ops.HigherOrderOperator) else str(op)


class _GlobalRef:
    """A module-level callable (``operator.getitem``, a builtin) by module and qualified name."""

    def __init__(self, fn: Any) -> None:
        self.module, self.qualname = fn.__module__ or "builtins", fn.__qualname__
        if resolve_global(self.module, self.qualname) is not fn:
            raise ValueError(f"cannot store {fn!r} in a repro: it is not reachable as {self.module}.{self.qualname}")


class _MemoryFormatRef:
    """A ``torch.memory_format`` by name: ``torch.save`` cannot pickle them (core ATen's ``clone`` takes one)."""

    def __init__(self, memory_format: torch.memory_format) -> None:
        self.name = str(memory_format).removeprefix("torch.")


class _ValueRef:
    """A node's ``meta["val"]`` tensor: what a fake tensor needs, without the tensor."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.shape, self.stride = tuple(int(s) for s in tensor.shape), tuple(int(s) for s in tensor.stride())
        self.dtype, self.device = tensor.dtype, str(tensor.device)


def resolve_global(module: str, qualname: str) -> Any:
    """The object ``module.qualname`` names (``"operator"``, ``"getitem"``), importing ``module``."""
    value: Any = importlib.import_module(module)
    for part in qualname.split("."):
        value = getattr(value, part)
    return value


def _encode(value: Any) -> Any:
    """Node references, ops and callables in args/kwargs to picklable references."""

    def one(item: Any) -> Any:
        if isinstance(item, torch.fx.Node):
            return _NodeRef(item.name)
        if isinstance(item, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
            return _OpRef(item)
        if isinstance(item, torch.memory_format):
            return _MemoryFormatRef(item)
        if callable(item) and not isinstance(item, (type, torch.nn.Module)) and hasattr(item, "__qualname__"):
            return _GlobalRef(item)
        return item

    return torch.fx.node.map_aggregate(value, one)


def _decode(value: Any, nodes: dict[str, torch.fx.Node]) -> Any:
    def one(item: Any) -> Any:
        if isinstance(item, _NodeRef):
            return nodes[item.name]
        if isinstance(item, _OpRef):
            return resolve_op_name(item.name)
        if isinstance(item, _GlobalRef):
            return resolve_global(item.module, item.qualname)
        if isinstance(item, _MemoryFormatRef):
            return getattr(torch, item.name)
        return item

    return torch.fx.node.map_aggregate(value, one)


def resolve_op_name(name: str) -> Any:
    """``"aten.add.Tensor"`` (``str`` of an overload) or ``"aten.add"`` (of a packet) back to the op."""
    value: Any = torch.ops
    for part in name.split("."):
        value = getattr(value, part)
    return value


def _encode_val(value: Any) -> Any:
    """``meta["val"]`` with tensors as ``_ValueRef``; raises ``TypeError`` for symbolic shapes."""
    def one(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            if any(not isinstance(s, int) for s in (*item.shape, *item.stride())):
                raise TypeError("symbolic shape")
            return _ValueRef(item)
        if isinstance(item, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise TypeError("symbolic value")
        return item

    return torch.fx.node.map_aggregate(value, one)


def _decode_val(value: Any, mode: FakeTensorMode) -> Any:
    def one(item: Any) -> Any:
        if isinstance(item, _ValueRef):
            with mode:
                return torch.empty_strided(item.shape, item.stride, dtype=item.dtype, device=item.device)
        return item

    return torch.fx.node.map_aggregate(value, one)


def _node_meta(node: torch.fx.Node) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    stack = node.meta.get("nn_module_stack")
    if stack:  # classes as qualified names: settings.module_stack reads either
        meta["nn_module_stack"] = {
            key: (path, cls if isinstance(cls, str) else f"{cls.__module__}.{cls.__qualname__}")
            for key, (path, cls) in stack.items()
        }
    if isinstance(node.meta.get("stack_trace"), str):
        meta["stack_trace"] = node.meta["stack_trace"]
    if "val" in node.meta:
        try:
            meta["val"] = _encode_val(node.meta["val"])
        except TypeError:
            pass  # recomputed from the inputs by lowering
    return meta


class _SavedGraphModule:
    """Pickles as ``_rebuild_graph_module(payload)``: the graph's nodes, code generator and state."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        nodes, state = [], {}
        for node in gm.graph.nodes:
            target = node.target
            if node.op == "call_function":
                target = _encode(target)
            elif node.op in ("get_attr", "call_module"):
                value = _owned_attribute(gm, target)  # a cond's branch is a GraphModule: saved the same way
                state[target] = _SavedGraphModule(value) if isinstance(value, torch.fx.GraphModule) else value
            nodes.append((node.op, node.name, target, _encode(node.args), _encode(node.kwargs), _node_meta(node)))
        self.payload = {"format": FORMAT, "nodes": nodes, "state": state, "codegen": gm.graph._codegen}

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _rebuild_graph_module, (self.payload,)


def _owned_attribute(gm: torch.fx.GraphModule, target: str) -> Any:
    value: Any = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _rebuild_graph_module(payload: dict[str, Any]) -> torch.fx.GraphModule:
    """Rebuild the ``GraphModule`` a ``_SavedGraphModule`` described (the unpickler calls this)."""
    if payload.get("format") != FORMAT:
        raise ValueError(f"model.pt has repro format {payload.get('format')!r}; this trtcheck reads {FORMAT}")
    graph = torch.fx.Graph()
    nodes: dict[str, torch.fx.Node] = {}
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    for op, name, target, args, kwargs, meta in payload["nodes"]:
        if op == "call_function":
            target = _decode(target, nodes)
        if op == "output":
            node = graph.output(_decode(args, nodes)[0])
        else:
            node = graph.create_node(op, target, _decode(args, nodes), _decode(kwargs, nodes), name=name)
        meta = dict(meta)
        if "val" in meta:
            meta["val"] = _decode_val(meta["val"], mode)
        node.meta.update(meta)
        nodes[node.name] = node
    graph._codegen = payload["codegen"]
    return torch.fx.GraphModule(payload["state"], graph)
