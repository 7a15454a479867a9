"""TensorRT's ONNX parser table: the op types it documents as supported, and their types (data, not code).

Source: onnx/onnx-tensorrt ``docs/operators.md``, "TensorRT 10.15 supports operators in the inclusive
range of opset 9 to opset 24", every row whose "Supported" column is ``Y``. Converters may only emit
these op types (a test checks every op type in every model the converter tests build); the mixed-precision
rewrite keeps a node in float32 where the parser takes no low type for its op. Per-op restrictions from that
table that matter to trtcheck's converters (2D/3D pooling only, no MaxPool indices, no pooling dilations, only the
first output of LayerNormalization) are enforced by the converters' validators.
"""

TENSORRT_DOMAIN = "trt"
"""The ONNX domain of TensorRT's own ops, which its parser reads (ModelOpt's ONNX exports write NVFP4 with it)."""
FP4_DYNAMIC_QUANTIZE = "TRT_FP4DynamicQuantize"
"""TensorRT's DynamicQuantize layer for NVFP4 in that domain: ``(x, double_quant_scale) -> (E2M1 codes, E4M3 block
scales)``, attributes ``axis``, ``block_size`` and ``scale_type``."""
TENSORRT_DOMAIN_OPS: frozenset[str] = frozenset({FP4_DYNAMIC_QUANTIZE})

TENSORRT_VERSION = "10.15"
SOURCE = "https://github.com/onnx/onnx-tensorrt/blob/main/docs/operators.md"

TENSORRT_ONNX_OPS: frozenset[str] = frozenset(
    {
        "Abs", "Acos", "Acosh", "Add", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
        "Attention", "AveragePool", "BatchNormalization", "BlackmanWindow", "Cast", "CastLike", "Ceil",
        "Celu", "Clip", "Concat", "Constant", "ConstantOfShape", "Conv", "ConvTranspose", "Cos", "Cosh",
        "CumSum", "DeformConv", "DepthToSpace", "DequantizeLinear", "Div", "Dropout", "Einsum", "Elu",
        "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor", "Gather", "GatherElements",
        "GatherND", "Gelu", "Gemm", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Greater",
        "GreaterOrEqual", "GridSample", "GroupNormalization", "GRU", "HammingWindow", "HannWindow",
        "HardSigmoid", "HardSwish", "Hardmax", "Identity", "If", "ImageScaler", "InstanceNormalization",
        "IsInf", "IsNaN", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual", "Log", "LogSoftmax",
        "Loop", "LRN", "LSTM", "LpNormalization", "LpPool", "MatMul", "Max", "MaxPool", "Mean",
        "MeanVarianceNormalization", "Min", "Mish", "Mod", "Mul", "Neg", "NonMaxSuppression", "NonZero",
        "Not", "OneHot", "Or", "Pad", "ParametricSoftplus", "Pow", "PRelu", "QuantizeLinear",
        "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Range", "Reciprocal",
        "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
        "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu", "Reshape", "Resize", "ReverseSequence",
        "RMSNormalization", "RNN", "RoiAlign", "RotaryEmbedding", "Round", "STFT", "ScaledTanh", "Scan",
        "Scatter", "ScatterElements", "ScatterND", "Selu", "Shape", "Shrink", "Sigmoid", "Sign", "Sin",
        "Sinh", "Size", "Slice", "Softmax", "Softplus", "Softsign", "SpaceToDepth", "Split", "Sqrt",
        "Squeeze", "Sub", "Sum", "Tan", "Tanh", "TensorScatter", "ThresholdedRelu", "Tile", "TopK",
        "Transpose", "Trilu", "Unsqueeze", "Upsample", "Where", "Xor",
    }
)

# The "Supported Types" column of the same table (TensorRT 10.15) for the op types trtcheck's
# converters emit, as ONNX element type names. The type meant is the op's data type: its first input
# (Where: its second), and for Cast also its output. Types outside these sets make TensorRT's parser
# reject the model even though ONNX Runtime may run it, so a test checks every converted node.
_FP = frozenset({"FLOAT", "FLOAT16", "BFLOAT16"})
_FP_INT = _FP | {"INT32", "INT64"}
_ANY = _FP_INT | {"BOOL"}
_BOOL = frozenset({"BOOL"})

TENSORRT_ONNX_TYPES: dict[str, frozenset[str]] = {
    **dict.fromkeys(
        ["Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "AveragePool", "BatchNormalization", "Ceil",
         "Celu", "Clip", "Conv", "ConvTranspose", "Cos", "Cosh", "CumSum", "Elu", "Erf", "Exp", "Floor",
         "Gemm", "GlobalAveragePool", "HardSigmoid", "HardSwish", "InstanceNormalization",
         "LayerNormalization", "LeakyRelu", "Log", "LogSoftmax", "MatMul", "MaxPool", "PRelu",
         "Reciprocal", "Resize", "Round", "Selu", "Sigmoid", "Sin", "Sinh", "Softmax", "Softplus", "Sqrt",
         "Tan", "Tanh", "TopK", "GridSample"],
        _FP,
    ),
    **dict.fromkeys(
        ["Abs", "Add", "ArgMax", "ArgMin", "DepthToSpace", "Div", "Equal", "Greater", "GreaterOrEqual",
         "IsNaN", "Less", "LessOrEqual", "Max", "Min", "Mod", "Mul", "Neg", "Pad", "Pow", "ReduceL1",
         "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
         "ReduceProd", "ReduceSum", "ReduceSumSquare", "Relu", "ScatterElements", "ScatterND", "Sign", "Sub"],
        _FP_INT,
    ),
    **dict.fromkeys(
        ["Concat", "Expand", "Gather", "GatherElements", "Identity", "Reshape", "Slice", "Split", "Squeeze",
         "Tile", "Transpose", "Unsqueeze", "Where"],
        _ANY,
    ),
    **dict.fromkeys(["And", "Not", "Or", "Xor"], _BOOL),
    "Cast": _ANY | {"UINT8"},
    # Explicit quantization: QuantizeLinear takes float data, DequantizeLinear its codes; zero points must be 0.
    "QuantizeLinear": _FP,
    "DequantizeLinear": frozenset({"INT8", "FLOAT8E4M3FN", "FLOAT4E2M1"}),
    FP4_DYNAMIC_QUANTIZE: _FP,
    # Dynamic shapes: the shape of a tensor of any type, and a Range from SymInt bounds.
    "Shape": _ANY,
    "Range": frozenset({"FLOAT", "INT32", "INT64"}),
}
