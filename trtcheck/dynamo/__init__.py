"""The torch.compile frontend: models ``torch.export`` refuses (a detector's box selection, NMS) run as
``torch.compile(model, backend="tensorrt")`` deploys them, each graph dynamo captures between graph breaks
partitioned and compiled by trtcheck on its own, the breaks run in Python.

``capture`` records the graphs and their breaks (with the inputs each graph was called with, for verification);
``TrtcheckBackend`` is the dynamo backend that compiles each graph with trtcheck's pipeline; ``compile_dynamo`` the
whole model under it.
"""

from trtcheck.dynamo.backend import CompiledGraph, DynamoModule, TrtcheckBackend, compile_dynamo
from trtcheck.dynamo.capture import Capture, CapturedGraph, GraphBreak, capture

__all__ = ["Capture", "CapturedGraph", "CompiledGraph", "DynamoModule", "GraphBreak", "TrtcheckBackend", "capture", "compile_dynamo"]
