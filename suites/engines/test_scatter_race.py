"""An engine whose graph reduces by scatter runs on one thread: ONNX Runtime 1.32's CPU ScatterND with
``reduction="add"`` races over its intra-op threads where indices repeat (``F.fold``, an accumulating index_put: timm's
volo_d1_224 was up to 0.03 off eager on one call in four, this fold up to 3.2 off with 2 threads)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import trtcheck


class Fold(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.fold(x, output_size=(28, 28), kernel_size=3, padding=1, stride=2) * 1.0


def test_an_accumulating_fold_gives_eager_s_values_on_every_call():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the race needs two intra-op threads, what CI's 2 cores give
    try:
        x = torch.randn(1, 192 * 9, 196, generator=torch.Generator().manual_seed(0))
        compiled = trtcheck.compile(Fold(), (x,), trtcheck.Settings(min_block_size=1), backend="onnxruntime")
        expected = Fold()(x)
        errors = [(compiled(x) - expected).abs().max().item() for _ in range(20)]
    finally:
        torch.set_num_threads(threads)
    assert max(errors) < 1e-5, errors
