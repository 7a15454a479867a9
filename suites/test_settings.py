"""Settings as the user gives them: containers in ``torch_executed_modules``, and bad settings of every kind.

Naming an ``nn.ModuleList`` that forward only iterates (by path or by class) forces every module inside it, though
no node's ``nn_module_stack`` names the container itself; every bad setting is a ``SettingsError`` that names the
problem and the fix.
"""

from __future__ import annotations

import pytest
import torch

import trtcheck
from trtcheck import ReasonKind, Settings, Target
from trtcheck.names import ModuleMatcher
from trtcheck.provenance import module_stack
from trtcheck.settings import AUTOCAST_POLICIES, Autocast


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


class Net(torch.nn.Module):
    """A ModuleList iterated in a loop (never called itself), a second one whose name extends the first's,
    a called Sequential, and modules forward never calls."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(4, 4)
        self.blocks = torch.nn.ModuleList([Block(), Block(), Block()])
        self.blocks2 = torch.nn.ModuleList([Block()])
        self.head = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.unused = torch.nn.Linear(4, 4)
        self.spare = torch.nn.Tanh()

    def forward(self, x):
        x = torch.sigmoid(self.stem(x))
        for block in self.blocks:
            x = block(x)
        for block in self.blocks2:
            x = block(x)
        return self.head(x) + 1


@pytest.fixture(scope="module")
def net():
    torch.manual_seed(0)
    return Net().eval(), (torch.rand(2, 4),)


def everything(node):
    return True


def inside(node, prefixes):
    return any(path == p or path.startswith(p + ".") for path, _ in module_stack(node) for p in prefixes)


def partition_with(net, modules):
    model, inputs = net
    settings = Settings(min_block_size=1, torch_executed_modules=modules)
    return trtcheck.partition(model, inputs, settings=settings, support=everything)


def assert_forced_exactly(partition, prefixes, spec):
    forced = 0
    for node in partition.compute_nodes:
        reason = partition.reasons[node]
        if inside(node, prefixes):
            forced += 1
            assert partition.target_of(node) is Target.TORCH, partition.explain([node])
            assert reason.kind is ReasonKind.FORCED_MODULE, partition.explain([node])
            assert repr(spec) in reason.detail  # names the entry the user wrote
        else:
            assert partition.target_of(node) is Target.TENSORRT, partition.explain([node])
            assert reason.kind is not ReasonKind.FORCED_MODULE
    assert forced, partition.explain()
    # check_invariants resolves the names again from the graph alone: a container must still resolve
    assert trtcheck.check_invariants(partition, support=everything) == []


# --- containers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, prefixes",
    [
        ("blocks", {"blocks"}),  # a ModuleList by path: all of it, not "blocks2"
        ("ModuleList", {"blocks", "blocks2"}),  # by class: every ModuleList
        ("torch.nn.modules.container.ModuleList", {"blocks", "blocks2"}),
        ("Sequential", {"head"}),
        ("blocks.0", {"blocks.0"}),  # one element still forces only itself
        ("blocks.1.lin", {"blocks.1.lin"}),
    ],
)
def test_a_container_forces_every_node_inside_it(net, spec, prefixes):
    partition = partition_with(net, [spec])
    assert_forced_exactly(partition, prefixes, spec)


def test_nested_entries_name_the_outermost_forced_module(net):
    partition = partition_with(net, ["blocks.0", "blocks"])
    assert_forced_exactly(partition, {"blocks"}, "blocks")


def test_a_graph_module_resolves_containers_from_the_stack_alone(net):
    model, inputs = net
    gm = trtcheck.lower(model, inputs)
    settings = Settings(min_block_size=1, torch_executed_modules=["blocks"])
    assert_forced_exactly(trtcheck.partition(gm, inputs, settings=settings, support=everything), {"blocks"}, "blocks")
    # a class no node's nn_module_stack names cannot be known without the model
    with pytest.raises(trtcheck.SettingsError, match="'ModuleList' is neither a submodule path"):
        trtcheck.partition(gm, inputs, settings=Settings(torch_executed_modules=["ModuleList"]), support=everything)


def test_the_matcher_tests_dotted_prefixes_only():
    matcher = ModuleMatcher({"blocks": "ModuleList", "head.0": "head.0"})
    assert matcher.forcing("blocks") == "ModuleList"
    assert matcher.forcing("blocks.2.lin") == "ModuleList"
    assert matcher.forcing("blocks2.0") is None
    assert matcher.forcing("head") is None
    assert matcher.forcing("head.0") == "head.0"
    assert ModuleMatcher().forcing("blocks") is None


# --- coercion -----------------------------------------------------------------------------------------


def test_coerce_gives_defaults_or_the_same_settings():
    assert Settings.coerce(None) == Settings()
    settings = Settings(min_block_size=2)
    assert Settings.coerce(settings) is settings


# --- bad settings -------------------------------------------------------------------------------------

BAD_SETTINGS = {
    # not a Settings at all
    "dict": (lambda: {"min_block_size": 2}, r"got a dict: write trtcheck\.Settings\(\*\*d\), here trtcheck\.Settings\(min_block_size=2\)"),
    "dict_with_typo": (lambda: {"min_blok_size": 2}, r"'min_blok_size' \(did you mean 'min_block_size'\?\)"),
    "int": (lambda: 3, r"settings must be a trtcheck\.Settings .*got 3 \(int\)"),
    "keyword_typo": (lambda: Settings(min_blok_size=2), r"no setting 'min_blok_size': did you mean 'min_block_size'"),
    # min_block_size
    "min_block_size_zero": (lambda: Settings(min_block_size=0), r"min_block_size must be >= 1, got 0: use 1"),
    "min_block_size_negative": (lambda: Settings(min_block_size=-3), r"min_block_size must be >= 1"),
    "min_block_size_float": (lambda: Settings(min_block_size=2.5), r"min_block_size must be an int >= 1, got 2\.5"),
    "min_block_size_str": (lambda: Settings(min_block_size="3"), r"min_block_size must be an int >= 1, got '3' \(str\)"),
    "min_block_size_bool": (lambda: Settings(min_block_size=True), r"min_block_size must be an int >= 1, got True \(bool\)"),
    "min_block_size_none": (lambda: Settings(min_block_size=None), r"min_block_size must be an int"),
    # segmentation
    "segmentation_near": (lambda: Settings(segmentation="dependency-aware"), r"did you mean 'dependency_aware'"),
    "segmentation_near_naive": (lambda: Settings(segmentation="Naive"), r"did you mean 'naive'"),
    "segmentation_unknown": (lambda: Settings(segmentation="greedy"), r"segmentation must be one of 'naive', 'dependency_aware'"),
    "segmentation_none": (lambda: Settings(segmentation=None), r"segmentation must be one of .*got None"),
    # require_full_compilation
    "full_compilation_str": (
        lambda: Settings(require_full_compilation="yes"),
        r"require_full_compilation must be True or False, got 'yes'",
    ),
    "full_compilation_int": (
        lambda: Settings(require_full_compilation=1),
        r"require_full_compilation must be True or False, got 1 \(int\)",
    ),
    "full_compilation_none": (lambda: Settings(require_full_compilation=None), r"require_full_compilation must be True or False"),
    # torch_executed_ops: the container, its entries, its names
    "ops_string": (lambda: Settings(torch_executed_ops="aten::relu"), r"single string 'aten::relu': write \['aten::relu'\]"),
    "ops_none": (
        lambda: Settings(torch_executed_ops=None),
        r"torch_executed_ops must be a list of op names, got None .*write \[\] for none",
    ),
    "ops_int": (lambda: Settings(torch_executed_ops=3), r"torch_executed_ops must be a list of op names, got 3 \(int\)"),
    "ops_dict": (lambda: Settings(torch_executed_ops={"aten::relu": True}), r"torch_executed_ops must be a list"),
    "ops_entry_int": (lambda: Settings(torch_executed_ops=[3]), r"entries must be op names or torch\.ops objects, got 3"),
    "ops_entry_none": (lambda: Settings(torch_executed_ops=[None]), r"entries must be op names"),
    "ops_unknown": (lambda: Settings(torch_executed_ops=["aten::rleu"]), r"unknown op 'aten::rleu'.*Did you mean: .*aten::relu"),
    "ops_no_namespace": (lambda: Settings(torch_executed_ops=["relu"]), r"unknown op 'relu'.*aten::relu"),
    "ops_bad_overload": (lambda: Settings(torch_executed_ops=["aten.add.Tensr"]), r"has no overload 'Tensr'.*Tensor"),
    # torch_executed_modules: the container, its entries, its names
    "modules_string": (lambda: Settings(torch_executed_modules="blocks"), r"single string 'blocks': write \['blocks'\]"),
    "modules_none": (lambda: Settings(torch_executed_modules=None), r"torch_executed_modules must be a list of module names, got None"),
    "modules_int": (lambda: Settings(torch_executed_modules=5), r"torch_executed_modules must be a list .*got 5 \(int\)"),
    "modules_entry_int": (lambda: Settings(torch_executed_modules=[0]), r"entries must be strings .*got 0 \(int\)"),
    "modules_entry_class": (
        lambda: Settings(torch_executed_modules=[Block]),
        r"entries must be strings .*got the class Block: write 'Block'",
    ),
    "modules_entry_module": (
        lambda: Settings(torch_executed_modules=[Block()]),
        r"got a Block module: write its path in the model .* class name 'Block'",
    ),
    "modules_unknown": (
        lambda: Settings(torch_executed_modules=["blokcs"]),
        r"'blokcs' is neither a submodule path.*Did you mean: .*blocks",
    ),
    "modules_unknown_class": (lambda: Settings(torch_executed_modules=["Blok"]), r"Did you mean: .*Block"),
    "modules_empty_name": (lambda: Settings(torch_executed_modules=[""]), r"'' is neither a submodule path"),
    "modules_never_called": (
        lambda: Settings(torch_executed_modules=["unused"]),
        r"'unused' is a submodule of this model, but no node .* forward never calls it",
    ),
    "modules_class_never_called": (
        lambda: Settings(torch_executed_modules=["Tanh"]),
        r"'Tanh' is a module class of this model \(1 instance\(s\): 'spare'\).*never calls",
    ),
    "modules_one_of_two_never_called": (lambda: Settings(torch_executed_modules=["blocks", "unused"]), r"'unused' is a submodule"),
    # TensorRT 11's precision settings (issue 40)
    "tf32_str": (lambda: Settings(tf32="yes"), r"tf32 must be True or False, got 'yes' \(str\)"),
    "use_fp32_acc_int": (lambda: Settings(precision="fp16", use_fp32_acc=1), r"use_fp32_acc must be True or False, got 1 \(int\)"),
    "use_fp32_acc_at_fp32": (
        lambda: Settings(use_fp32_acc=True), r"use_fp32_acc=True keeps matmul sums in float32 .*set precision='fp16'",
    ),
    "autocast_at_fp32": (lambda: Settings(autocast="torch_tensorrt"), r"autocast='torch_tensorrt' .*precision is 'fp32'"),
    "autocast_unknown_name": (
        lambda: Settings(precision="fp16", autocast="modelopt"), r"autocast must be None, a policy name \('torch_tensorrt'\)",
    ),
    "autocast_bad_regex": (
        lambda: Settings(precision="fp16", autocast=Autocast(excluded_nodes=("(",))), r"excluded_nodes: '\(' is not a regular expression",
    ),
    "autocast_nodes_string": (
        lambda: Settings(precision="fp16", autocast=Autocast(excluded_nodes="relu")),
        r"excluded_nodes must be a list of strings, got 'relu'",
    ),
    "autocast_threshold": (
        lambda: Settings(precision="fp16", autocast=Autocast(max_output_threshold=0)), r"max_output_threshold must be a number > 0 or None",
    ),
    "autocast_depth": (
        lambda: Settings(precision="fp16", autocast=Autocast(max_depth_of_reduction=-1)), r"max_depth_of_reduction must be an int >= 0",
    ),
    "autocast_calibration": (
        lambda: Settings(precision="fp16", autocast=Autocast(calibration={"relu": "big"})), r"calibration entries must be node name",
    ),
    "autocast_op_typo": (
        lambda: Settings(precision="fp16", autocast=Autocast(excluded_ops=("aten::rleu",))),
        r"^Autocast.excluded_ops: unknown op 'aten::rleu'.*aten::relu",  # the field the user wrote, not fp32_nodes
    ),
    "autocast_op_not_an_op": (
        lambda: Settings(precision="fp16", autocast=Autocast(excluded_ops=("relu",))), r"excluded_ops entries are op names",
    ),
    "autocast_unknown_field": (
        lambda: Settings(precision="fp16", autocast={"threshold": 3}), r"autocast has no field\(s\) 'threshold'",
    ),
}


@pytest.mark.parametrize("make, message", list(BAD_SETTINGS.values()), ids=list(BAD_SETTINGS))
def test_bad_settings_are_a_settings_error_naming_the_fix(net, make, message):
    model, inputs = net
    with pytest.raises(trtcheck.SettingsError, match=message):
        trtcheck.partition(model, inputs, settings=make(), support=everything)


def test_precision_settings_round_trip_through_json_as_a_repro_writes_them():
    """A repro's settings.json is ``dataclasses.asdict`` of the Settings: an Autocast reads back as the same policy."""
    import dataclasses
    import json

    settings = Settings(precision="fp16", use_fp32_acc=True, tf32=True,
                        autocast=Autocast(excluded_nodes=("^conv",), excluded_ops=("aten.softmax.int",), calibration={"add": 700.0}))
    again = Settings(**json.loads(json.dumps(dataclasses.asdict(settings))))
    assert again == settings and isinstance(again.autocast, Autocast)
    assert Settings.coerce(again) is again
    assert Autocast.of("torch_tensorrt") is AUTOCAST_POLICIES["torch_tensorrt"] == Autocast()
    assert Autocast().max_output_threshold == 512.0 and Autocast().max_depth_of_reduction is None  # Torch-TensorRT's defaults
