"""Arguments of an ATen call bound to the overload's own schema: by name, defaults filled, nothing left over.

An fx node carries its arguments as export happened to write them: some positional, some keyword, and
trailing defaults left out. A converter that reads ``node.args[7]`` misses a keyword-passed value, and
one that reads ``node.kwargs.get("alpha", 1)`` misses a positional one; either way an argument can be
silently ignored and the ONNX model computes something else. Binding once against ``target._schema``
(the way Torch-TensorRT and onnxscript's torchlib read arguments) gives every converter and validator
the same complete, named view, and rejects calls that do not fit the schema.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import torch
import torch.fx

__all__ = ["BoundArgs", "bind"]


class BoundArgs:
    """The arguments of one ATen call, by the names its schema gives them (``args.output_padding``).

    Every argument of the schema is present: the ones the call omitted hold the schema's default. Tensor
    arguments are the fx Nodes that produce them; ``meta(name)`` gives their FakeTensor. ``node`` is the
    call itself, for what is not an argument (its output metadata, its users). Not a Mapping on purpose:
    ``keys``/``values``/``get`` methods would shadow schema arguments of those names (``args["values"]``
    works either way).
    """

    __slots__ = ("node", "_values")

    def __init__(self, node: torch.fx.Node, values: dict[str, Any]) -> None:
        self.node = node
        self._values = values

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(
                f"{self.node.target} has no argument {name!r} (its schema has: {', '.join(self._values)})"
            ) from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(
                f"{self.node.target} has no argument {name!r} (its schema has: {', '.join(self._values)})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def as_dict(self) -> dict[str, Any]:
        """A copy of the bound arguments, name -> value, in schema order."""
        return dict(self._values)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={_show(v)}" for k, v in self._values.items())
        return f"{self.node.target}({shown})"

    def meta(self, name: str) -> torch.Tensor:
        """The FakeTensor of tensor argument ``name`` (TypeError when the argument is not a tensor node)."""
        value = self[name]
        meta = value.meta.get("val") if isinstance(value, torch.fx.Node) else None
        if not isinstance(meta, torch.Tensor):
            raise TypeError(f"argument {name!r} of {self.node.target} is {_show(value)}, not a tensor")
        return meta


def _show(value: Any) -> str:
    if isinstance(value, torch.fx.Node):
        return f"%{value.name}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(_show, value)) + "]"
    return repr(value)


def bind(node: torch.fx.Node) -> BoundArgs:
    """Bind ``node``'s positional and keyword arguments to its OpOverload's schema, defaults filled.

    TypeError, naming the op and the argument, for a call that does not fit: a target that is not an
    ATen overload, too many positional arguments, an unknown or repeated keyword, a missing argument.
    """
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        raise TypeError(f"{node.name}: {target} is not an ATen OpOverload, so it has no schema to bind to")
    schema = target._schema.arguments
    positional = [a for a in schema if not a.kwarg_only]
    if len(node.args) > len(positional):
        raise TypeError(
            f"{node.name}: {target} takes {len(positional)} positional arguments, the call passes {len(node.args)}"
        )
    values: dict[str, Any] = {a.name: v for a, v in zip(positional, node.args)}
    names = {a.name for a in schema}
    for name, value in node.kwargs.items():
        if name not in names:
            raise TypeError(f"{node.name}: {target} has no argument {name!r} (its schema has: {', '.join(names)})")
        if name in values:
            raise TypeError(f"{node.name}: argument {name!r} of {target} is passed twice")
        values[name] = value
    bound: dict[str, Any] = {}
    for argument in schema:  # schema order, whatever order the call used
        if argument.name in values:
            bound[argument.name] = values[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = copy.copy(argument.default_value)  # a list default must not be shared
        else:
            raise TypeError(f"{node.name}: {target} needs argument {argument.name!r}, the call does not pass it")
    return BoundArgs(node, bound)

