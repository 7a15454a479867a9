"""The ONNX format trtcheck writes and reads, below conversion, engines and the compiler: what all three share.

- :mod:`~trtcheck.onnx_format.weights`: weight placeholders (weights held by reference) and ``with_weights``;
- :mod:`~trtcheck.onnx_format.origins`: node origins, the ``{fx node}/{op type}`` names and ``doc_string`` format;
- :mod:`~trtcheck.onnx_format.tensorrt_parser`: TensorRT's ONNX parser table (op types and their types);
- :mod:`~trtcheck.onnx_format.graph`: ONNX element types and the graph helpers of the precision rewrites.

It imports only ``trtcheck.dtypes`` and ``trtcheck.errors`` (and onnx, torch): reading an engine's node origins or
filling its weights loads no converter. The modules import none of each other; this package re-exports nothing.
"""
