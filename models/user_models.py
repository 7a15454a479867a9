"""Models of the kinds users write that once broke trtcheck (issue 21): state updated in place, weights reloaded
after compiling, a padding mask whose eager fast path differs from what export traces, autograd in forward.

Each entry is one way a compiled module went wrong while ``verify``'s own checks said little:

* ``kv_cache_step``: a decoder step with its KV cache passed in and updated in place (``index_copy_``), read
  both before the update (the old cache) and after it: ``segmentation="optimal"`` once ran the update before
  an engine still reading the old cache.
* ``ring_buffer``: a buffer ``forward`` reads, then overwrites at a position another buffer advances.
* ``reloaded_weights``: a plain MLP; ``suites/models/test_user_models.py`` reloads its weights after compiling
  (a compiled module is a snapshot of the weights it was compiled with).
* ``padded_transformer``: ``nn.TransformerEncoder`` with a padding mask. Under ``torch.no_grad()`` eager takes
  its fast path (zeros at padded positions), which torch.export never traces; the wrapper turns that path off
  during its call, as ``verify``'s ``grad_mode`` violation advises, so eager and the compiled module agree.
* ``force_field``: the negative gradient of an energy, ``torch.autograd.grad`` inside forward: torch.export
  cannot trace it, so trtcheck lowers it with ``make_fx`` (``lowering.export._trace_through_autograd``).

``pytest --trtcheck`` runs each under the default presets, and ``suites/matrix/test_user_models.py`` under every
preset, ``optimal`` included.
"""

from __future__ import annotations

import torch
from torch import nn

from .registry import ZooEntry, register, seeded

__all__ = ["USER_ZOO", "ForceField", "KVCacheStep", "PaddedTransformer", "RingBuffer"]


class KVCacheStep(nn.Module):
    """One attention step over a cache of keys: the new key goes in at ``pos`` (in place), the query attends
    over the updated cache, and the old cache's mean (read before the update) feeds the output too."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.out = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor, cache: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        old = cache.mean(1)  # read before the update: must see the old cache
        cache.index_copy_(1, pos, torch.relu(self.key(x)).unsqueeze(1))
        scores = torch.softmax((cache @ self.query(x).unsqueeze(-1)).squeeze(-1), dim=-1)
        attended = (scores.unsqueeze(-1) * cache).sum(1)
        return self.out(torch.cat([attended, torch.tanh(self.query(old))], dim=-1))


class RingBuffer(nn.Module):
    """Keeps the last ``size`` inputs in a buffer; each call reads the ring, then overwrites its oldest slot."""

    def __init__(self, size: int = 4, width: int = 8) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.register_buffer("ring", torch.zeros(size, width))
        self.register_buffer("position", torch.zeros(1, dtype=torch.int64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        previous = self.ring.mean(0)
        self.ring.index_copy_(0, self.position, torch.relu(self.linear(x)))
        self.position.copy_((self.position + 1) % self.ring.shape[0])
        return self.linear(previous).unsqueeze(0) + self.ring.sum(0)


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(8, 16)
        self.second = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))


class PaddedTransformer(nn.Module):
    """A transformer encoder over padded sequences (``mask`` True where padded)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(width, nhead=2, dim_feedforward=32, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(width, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        fast = torch.backends.mha.get_fastpath_enabled()
        torch.backends.mha.set_fastpath_enabled(False)  # the path torch.export traces, under no_grad too
        try:
            return self.head(self.encoder(x, src_key_padding_mask=mask))
        finally:
            torch.backends.mha.set_fastpath_enabled(fast)


class ForceField(nn.Module):
    """Forces as the negative gradient of a learned energy of the positions (a force field's forward)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(3, 16)
        self.energy = nn.Linear(16, 1)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            positions = positions.detach().requires_grad_(True)
            energy = self.energy(torch.tanh(self.embed(positions))).sum()
            (gradient,) = torch.autograd.grad(energy, positions)
        return -gradient


def _padding_mask(batch: int, length: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each row padded after a random length of at least 2: never a fully padded row (its softmax is NaN)."""
    lengths = torch.randint(2, length + 1, (batch,), generator=generator)
    return torch.arange(length).unsqueeze(0) >= lengths.unsqueeze(1)


@seeded()
def _kv_cache_step():
    return KVCacheStep().eval(), (torch.randn(2, 8), torch.randn(2, 4, 8), torch.tensor([2]))


@seeded()
def _ring_buffer():
    model = RingBuffer().eval()
    with torch.no_grad():
        model.ring.copy_(torch.randn(4, 8))
    return model, (torch.randn(1, 8),)


@seeded()
def _reloaded_weights():
    return Mlp().eval(), (torch.randn(2, 8),)


@seeded()
def _padded_transformer():
    return PaddedTransformer().eval(), (torch.randn(2, 6, 16), _padding_mask(2, 6))


def _padded_transformer_input_sets() -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(2, 6, 16, generator=generator), _padding_mask(2, 6, generator)) for _ in range(2)]


@seeded()
def _force_field():
    return ForceField().eval(), (torch.randn(5, 3),)


_ENTRIES = (
    ZooEntry("kv_cache_step", _kv_cache_step, ("user", "state"), fallback_module="out"),
    ZooEntry("ring_buffer", _ring_buffer, ("user", "state"), fallback_module="linear"),
    ZooEntry("reloaded_weights", _reloaded_weights, ("user", "weights"), fallback_module="second"),
    ZooEntry(
        "padded_transformer", _padded_transformer, ("user", "grad_mode"), fallback_module="encoder.layers.1",
        input_sets=_padded_transformer_input_sets,
    ),
    ZooEntry("force_field", _force_field, ("user", "autograd")),  # make_fx keeps no module stack: no fallback module
)

USER_ZOO: tuple[str, ...] = tuple(register(entry).name for entry in _ENTRIES)
