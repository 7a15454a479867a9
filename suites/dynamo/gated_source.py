"""The source of a model torch.export refuses (a branch on a tensor's value, line 9 of it), for the tests that write it
into a downstream project: the CLI's (``suites/tools/test_cli_frontend.py``) and the plugin's
(``suites/testing/test_plugin_frontend.py``). Each appends its own ``build`` or test function."""

GATED_MODEL = '''
import torch


class Gated(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 4)

    def forward(self, x):
        y = torch.relu(self.stem(x))
        if y.mean() > 0.1:
            y = y * 2.0
        return torch.sigmoid(self.head(y))
'''
