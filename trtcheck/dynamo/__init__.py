"""The torch.compile frontend: models ``torch.export`` refuses (a detector's box selection, NMS) run as
``torch.compile(model, backend="tensorrt")`` deploys them, each graph dynamo captures between graph breaks
partitioned and compiled by trtcheck on its own, the breaks run in Python.

``compile`` and ``partition`` (``trtcheck.compile``, ``trtcheck.partition``) take a ``frontend`` (``frontend``);
``capture`` records the graphs and their breaks (with the inputs each graph was called with, for verification);
``TrtcheckBackend`` is the dynamo backend that compiles each graph with trtcheck's pipeline; ``compile_dynamo`` the
whole model under it.
"""

from trtcheck.dynamo.backend import CompiledGraph, DynamoModule, TrtcheckBackend, compile_dynamo
from trtcheck.dynamo.capture import Capture, CapturedGraph, GraphBreak, capture
from trtcheck.dynamo.frontend import FRONTENDS, GraphBreakWarning, check_frontend, compile, partition

__all__ = ["FRONTENDS", "Capture", "CapturedGraph", "CompiledGraph", "DynamoModule", "GraphBreak", "GraphBreakWarning",
           "TrtcheckBackend", "capture", "check_frontend", "compile", "compile_dynamo", "partition"]
