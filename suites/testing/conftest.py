"""pytester runs the downstream suites in this process and, after each run, unloads every module the run
imported. torch cannot be imported twice (its op libraries register once per process), so everything a
verification touches is imported here first, by one real verification."""

import torch

import trtcheck


class _Warm(torch.nn.Module):
    def forward(self, x):
        return torch.lgamma(torch.relu(x) + 1) * 2


trtcheck.verify(_Warm(), (torch.rand(2, 3),), trtcheck.Settings(min_block_size=1), num_inputs=1)
