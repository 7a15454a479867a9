"""``--tf32``, ``--use-fp32-acc`` and ``--autocast POLICY``: the ``Settings`` fields every command taking
``--precision`` builds, a bad combination exiting 2 with ``Settings``' own message, and a TF32 verify judged at tf32."""

from __future__ import annotations

import pytest

from trtcheck.errors import TrtcheckError
from trtcheck.tools import cli
from trtcheck.tools.cli import build_parser, main

ORT = ["--backend", "onnxruntime"]
COMMANDS = ["partition", "verify", "reduce", "precision", "compare"]

LARGE_K = '''
import torch


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).eval()
    return model, (torch.randn(8, 1024),)
'''


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_with_settings_takes_the_flags(command):
    tf32 = cli._settings(build_parser().parse_args([command, "m", "--tf32"]))
    assert tf32.tf32 is True and tf32.precision == "fp32" and not tf32.use_fp32_acc and tf32.autocast is None
    reduced = cli._settings(build_parser().parse_args(
        [command, "m", "--precision", "fp16", "--use-fp32-acc", "--autocast", "torch_tensorrt"]))
    assert reduced.use_fp32_acc is True and reduced.autocast == "torch_tensorrt" and reduced.tf32 is False
    plain = cli._settings(build_parser().parse_args([command, "m"]))
    assert (plain.tf32, plain.use_fp32_acc, plain.autocast) == (False, False, None)


@pytest.mark.parametrize(("options", "expected"), [
    (["--use-fp32-acc"], "use_fp32_acc=True keeps matmul sums in float32 under a reduced precision, but precision is 'fp32'"),
    (["--autocast", "torch_tensorrt"], "autocast='torch_tensorrt' keeps nodes in float32 under a reduced precision"),
])
def test_a_reduced_precision_option_at_fp32_exits_2_with_the_settings_message(factories, capsys, options, expected):
    assert main(["verify", f"{factories}:build", *ORT, *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trtcheck: error: ") and expected in err and "set precision='fp16' or 'bf16'" in err
    assert "Traceback" not in err


def test_an_unknown_autocast_policy_is_a_usage_error_naming_the_policies(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["verify", "m", "--autocast", "tensorrt"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --autocast: invalid choice: 'tensorrt'" in err and "torch_tensorrt" in err


def test_the_precision_search_gets_the_reduced_precision_options(factories, monkeypatch, capsys):
    """``trtcheck precision`` built its settings at fp32 and set the precision after: --use-fp32-acc would be refused."""
    from trtcheck.verification import fp32_search

    seen = []

    def search(model, example_inputs, precision, settings, **options):
        seen.append(settings)
        raise TrtcheckError("stopped here")

    monkeypatch.setattr(fp32_search, "search_fp32_nodes", search)
    argv = ["precision", f"{factories}:build", *ORT, "--precision", "bf16", "--use-fp32-acc", "--autocast", "torch_tensorrt"]
    assert main(argv) == 2 and "stopped here" in capsys.readouterr().err
    (settings,) = seen
    assert (settings.precision, settings.use_fp32_acc, settings.autocast) == ("bf16", True, "torch_tensorrt")


def test_verify_with_tf32_judges_a_large_k_chain_at_tf32(tmp_path, capsys):
    """The TF32 engine misses fp32's tolerances 30-fold (``suites/verification/test_tf32.py``); with --tf32 it is
    judged against eager under TF32 rounding and passes, and the report says so."""
    (tmp_path / "large_k.py").write_text(LARGE_K)
    assert main(["verify", f"{tmp_path / 'large_k.py'}:build", "--min-block-size", "1", *ORT, "--num-inputs", "2", "--tf32"]) == 0
    out = capsys.readouterr().out
    assert "tf32=True" in out and "to eager tf32's own error" in out
