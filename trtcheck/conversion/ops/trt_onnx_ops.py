"""The ONNX op types converters may emit: TensorRT's ONNX parser table, which ``trtcheck.onnx_format`` holds (the
mixed-precision rewrite and the engines read it too, and must not load a converter to do so)."""

from trtcheck.onnx_format.tensorrt_parser import SOURCE, TENSORRT_ONNX_OPS, TENSORRT_ONNX_TYPES, TENSORRT_VERSION

__all__ = ["SOURCE", "TENSORRT_ONNX_OPS", "TENSORRT_ONNX_TYPES", "TENSORRT_VERSION"]
