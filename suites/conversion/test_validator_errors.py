"""A validator that raises is a reason of its own (``VALIDATOR_ERROR``), never a silent "no converter".

The node still runs in PyTorch (a crash must not break partitioning), and a crash in a *built-in*
validator is an invariant violation (``validator_error``), so ``trtcheck.verify`` and the verification
matrix fail on it. The sweeps below run every built-in validator on every node of the model zoo and of
random core-ATen graphs and fail, listing every crash, when one raises.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given

import trtcheck
import trtcheck_zoo as models
from trtcheck import ReasonKind, Target
from trtcheck import conversion as converters
from trtcheck.conversion.arguments import BoundArgs
from trtcheck.conversion.ops import _common
from trtcheck.dynamo import capture
from trtcheck.testing.random_graphs import OPS, aten_graphs, build_graph, random_recipe

aten = torch.ops.aten


class Lgamma(torch.nn.Module):
    """One op with no built-in converter, so the tests can register a throwaway one for it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.lgamma(x).relu()


def _inputs() -> tuple[torch.Tensor]:
    return (torch.rand(2, 3) + 0.5,)


def _boom(node: torch.fx.Node | BoundArgs) -> bool:
    """A raising validator: a user's takes the node, a built-in ``check`` its bound arguments."""
    node = node.node if isinstance(node, BoundArgs) else node
    raise RuntimeError(f"boom on {node.name}")


def _convert_unused(ctx, node):  # never called: the validator raises first
    raise AssertionError("unreachable")


def _node(partition, target):
    return next(n for n in partition.compute_nodes if n.target == target)


def _partition(support=None):
    return trtcheck.partition(Lgamma(), _inputs(), trtcheck.Settings(min_block_size=1), support)


# --- the reason, and the invariant -------------------------------------------------------------------


def test_builtin_validator_error_is_its_own_reason_and_a_violation() -> None:
    # Registered through the built-in path: _common.converter is what every trtcheck.conversion.ops module
    # uses, and it marks the converter builtin=True (no monkeypatching). Its validator runs the shared
    # engine_refusal checks first (lgamma on float32 passes them), then our raising ``check``.
    with converters.Snapshot():
        _common.converter(aten.lgamma.default, check=_boom)(_convert_unused)
        assert converters.get(aten.lgamma.default).builtin
        partition = _partition()
        node = _node(partition, aten.lgamma.default)
        reason = partition.reasons[node]
        assert reason.kind is ReasonKind.VALIDATOR_ERROR
        assert reason.detail == f"aten.lgamma.default validator raised RuntimeError: boom on {node.name}"
        assert partition.target_of(node) is Target.TORCH
        assert partition.target_of(_node(partition, aten.relu.default)) is Target.TENSORRT  # the rest is unharmed
        assert not converters.is_convertible(node)  # the bool API still says "no", and does not raise

        violations = trtcheck.check_invariants(partition)
        assert [(v.rule, v.node) for v in violations] == [("validator_error", node.name)]
        assert "boom" in violations[0].message


def test_verify_fails_on_a_builtin_validator_error() -> None:
    """What the verification matrix (``pytest --trtcheck``) runs: the report lists the violation."""
    with converters.Snapshot():
        _common.converter(aten.lgamma.default, check=_boom)(_convert_unused)
        with pytest.raises(trtcheck.VerificationError, match=r"\[validator_error\]") as failure:
            trtcheck.verify(Lgamma(), _inputs(), trtcheck.Settings(min_block_size=1), num_inputs=1)
    assert failure.value.report.comparisons[0].passed  # the outputs are right: only the crash fails it


def test_user_validator_error_is_a_reason_not_a_violation() -> None:
    """A user's converter that crashes is reported as the node's reason, but it is the user's code, not
    a broken partition: check_invariants stays clean (documented in trtcheck.verification.invariants)."""
    with converters.Snapshot():
        converters.register(aten.lgamma.default, validator=_boom)(_convert_unused)
        converters.register(aten.relu.default, validator=_boom, override=True)(_convert_unused)
        assert not converters.get(aten.lgamma.default).builtin
        assert not converters.get(aten.relu.default).builtin  # an override of a built-in is the user's too
        partition = _partition()
        for target in (aten.lgamma.default, aten.relu.default):
            node = _node(partition, target)
            assert partition.reasons[node].kind is ReasonKind.VALIDATOR_ERROR
            assert partition.reasons[node].detail == f"{target} validator raised RuntimeError: boom on {node.name}"
            assert partition.target_of(node) is Target.TORCH
        assert trtcheck.check_invariants(partition) == []


def test_user_support_callable_that_raises() -> None:
    def support(node: torch.fx.Node) -> bool:
        if node.target is aten.lgamma.default:
            raise KeyError("no idea")
        return True

    partition = _partition(support)
    node = _node(partition, aten.lgamma.default)
    assert partition.reasons[node].kind is ReasonKind.VALIDATOR_ERROR
    assert partition.reasons[node].detail == "support check raised KeyError: 'no idea'"
    assert partition.target_of(node) is Target.TORCH
    assert trtcheck.check_invariants(partition, support) == []


def test_refusal_is_still_no_converter() -> None:
    with converters.Snapshot():
        _common.converter(aten.lgamma.default, check=lambda node: False)(_convert_unused)
        partition = _partition()
    assert partition.reasons[_node(partition, aten.lgamma.default)].kind is ReasonKind.NO_CONVERTER


def test_every_converter_of_trtcheck_converters_is_builtin() -> None:
    """Every converter the package registers on import is marked built-in (so the sweeps cover it)."""
    ours = [c for c in map(converters.get, converters.registered_targets()) if c.fn.__module__.startswith("trtcheck.conversion.ops")]
    assert len(ours) >= 120
    assert [str(c.target) for c in ours if not c.builtin] == []


# --- sweeps: no built-in validator raises on any real node ------------------------------------------


def _validator_crashes(gm: torch.fx.GraphModule, where: str) -> list[str]:
    """``where: node (target): error`` for every node whose built-in converter's validator raises."""
    crashes = []
    for node in gm.graph.nodes:
        converter = converters.get(node.target) if node.op == "call_function" else None
        if converter is None or not converter.builtin:
            continue
        error = converter.judge(node).error  # what partitioning calls (getitem's validator checks its producer)
        if error is not None:
            crashes.append(f"{where}: {node.name} ({node.target}): {type(error).__name__}: {error}")
    return crashes


# Lowering the whole zoo takes ~1 min on 2 cores: the slow tier (``--slow`` or ``-m slow``). The zoo lowering helper of
# collect_zoo_overloads.py returns target names, not graphs, so the graph is lowered here.
@pytest.mark.slow
@pytest.mark.parametrize("name", models.names())
def test_no_builtin_validator_raises_on_zoo_model(name: str) -> None:
    model, inputs = models.get(name).build()
    with torch.no_grad():
        if "detection" in models.get(name).tags:  # torch.export refuses a detector: each graph torch.compile captures
            captured, _ = capture(model, [inputs])
            graphs = [trtcheck.lower(graph.graph_module, graph.calls[0][1]) for graph in captured.graphs
                      if graph.calls and graph.compute_nodes]
        else:
            graphs = [trtcheck.lower(model, inputs)]
    assert any(converters.get(n.target) is not None for gm in graphs for n in gm.graph.nodes if n.op == "call_function")
    crashes = [crash for gm in graphs for crash in _validator_crashes(gm, name)]
    assert not crashes, "built-in validators raised:\n" + "\n".join(crashes)


def test_no_builtin_validator_raises_on_seeded_random_graphs() -> None:
    """The benchmarks' seeded generator: every op of the random graphs, many times, in many contexts."""
    crashes = []
    for seed in range(20):
        graph = build_graph(random_recipe(60, unsupported_fraction=0.1, seed=seed), seed=seed)
        crashes += _validator_crashes(graph.graph_module, f"seed {seed}")
    used = {step.op for seed in range(20) for step in random_recipe(60, 0.1, seed)}
    assert len(used) == len(OPS)  # the sweep does reach every op of the generator
    assert not crashes, "built-in validators raised:\n" + "\n".join(crashes)


@given(aten_graphs())
def test_no_builtin_validator_raises_on_hypothesis_graphs(graph) -> None:
    crashes = _validator_crashes(graph.graph_module, "graph")
    assert not crashes, "built-in validators raised:\n" + "\n".join(crashes)
