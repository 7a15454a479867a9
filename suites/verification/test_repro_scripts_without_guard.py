"""A user's script without an ``if __name__ == "__main__":`` guard (as the README's examples are written) that
registers a converter and verifies: its repro registers that converter without running the script again (issue 53,
item 19: ``python repro.py`` re-ran the whole script, a second verify and a second folder)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = '''
import torch
import trtcheck
from trtcheck import conversion

SCALE = 1.1


@conversion.register(torch.ops.aten.relu.default, override=True)
def wrong_relu(ctx, node):
    out = ctx.add("Relu", [ctx.name(node.args[0])])
    return ctx.add("Mul", [out, ctx.constant(SCALE, torch.float32)])


class Net(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1


print("THE SCRIPT'S TOP LEVEL RAN")
try:
    trtcheck.verify(Net(), (torch.randn(4, 8),), trtcheck.Settings(min_block_size=1), backend="onnxruntime",
                    report_dir={out!r})
except trtcheck.VerificationError as error:
    print("verify failed")
'''


def test_a_repro_of_an_unguarded_script_registers_its_converter_without_running_it_again(tmp_path):
    out = tmp_path / "out"
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent(SCRIPT.format(out=str(out))))
    first = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "verify failed" in first.stdout, first.stdout + first.stderr
    (folder,) = out.iterdir()
    again = subprocess.run([sys.executable, str(folder / "repro.py")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode != 0 and "VerificationError" in again.stderr, again.stdout + again.stderr  # it still fails
    assert "registered __main__.wrong_relu" in again.stdout
    assert "THE SCRIPT'S TOP LEVEL RAN" not in again.stdout  # no second verify
    assert [path.name for path in out.iterdir()] == [folder.name]  # and no second folder
