"""Write ``suites/engines/tensorrt_11_1_api.py``: TensorRT's builder-side Python API, read from its binding sources.

    python -m suites.engines.tensorrt_api_extract /path/to/NVIDIA/TensorRT v11.1 > suites/engines/tensorrt_11_1_api.py

``tensorrt_lean`` (a real 11.1 wheel that imports without a GPU) holds TensorRT's runtime classes and enums, not its
builder or ONNX parser, which ship only in the full ``tensorrt`` wheels whose libraries need CUDA. Their Python API is
what TensorRT's pybind11 sources declare (``python/src`` of NVIDIA/TensorRT at the release tag): every
``py::class_<...>(m, "Name")`` with its ``.def``/``.def_property*`` members and each method's keyword names (``"x"_a``),
every ``py::enum_<...>`` with its ``.value`` members, and the module's ``m.attr`` names. Enum values come from
``include/NvInfer.h`` where the fake's arithmetic depends on them (``NetworkDefinitionCreationFlag``). This is a
text scan of the sources, good for these declarations, not a C++ parser.
"""

from __future__ import annotations

import pprint
import re
import subprocess
import sys

FILES = ("python/src/infer/pyCore.cpp", "python/src/infer/pyGraph.cpp", "python/src/infer/pyFoundationalTypes.cpp",
         "python/src/parsers/pyOnnx.cpp")
CLASSES = ("Builder", "IBuilderConfig", "INetworkDefinition", "ILayer", "ITensor", "IOptimizationProfile", "IHostMemory",
           "OnnxParser", "ParserError", "Runtime", "ICudaEngine", "IExecutionContext")
ENUMS = ("NetworkDefinitionCreationFlag", "BuilderFlag", "DataType", "TensorIOMode", "MemoryPoolType", "OnnxParserFlag")
_DECLARATION = re.compile(r'py::(class_|enum_)<([^>]*(?:<[^>]*>[^>]*)*)>\s*(\w+)?\s*[({]\s*(m|\w+)\s*,\s*"(\w+)"')
_MEMBER = re.compile(r'\.(def|def_property|def_property_readonly|def_readwrite|def_readonly|def_static|value)\(\s*"(\w+)"')


def _call_text(text: str, start: int) -> str:
    depth = 0
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 0:
            return text[start:index]
    return text[start:]


def extract(repo: str, tag: str) -> dict[str, object]:
    classes: dict[str, dict[str, tuple[str, ...] | None]] = {}
    enums: dict[str, list[str]] = {}
    module: set[str] = set()
    for path in FILES:
        text = subprocess.run(["git", "-C", repo, "show", f"{tag}:{path}"], capture_output=True, text=True, check=True).stdout
        found = list(_DECLARATION.finditer(text))
        for index, declaration in enumerate(found):
            kind, name = declaration.group(1), declaration.group(5)
            chunk = text[declaration.end():found[index + 1].start() if index + 1 < len(found) else len(text)]
            if kind == "class_" and name in CLASSES:
                members = classes.setdefault(name, {})
                for member in _MEMBER.finditer(chunk):
                    if member.group(1) in ("def", "def_static"):
                        keywords = tuple(re.findall(r'"(\w+)"_a', _call_text(chunk, chunk.index("(", member.start()))))
                        members.setdefault(member.group(2), keywords)
                    elif member.group(1) != "value":
                        members.setdefault(member.group(2), None)
            elif kind == "enum_" and name in ENUMS:
                enums.setdefault(name, [m.group(2) for m in _MEMBER.finditer(chunk) if m.group(1) == "value"])
        module |= set(re.findall(r'm\.attr\("(\w+)"\)', text))
    header = subprocess.run(["git", "-C", repo, "show", f"{tag}:include/NvInfer.h"], capture_output=True, text=True, check=True).stdout
    body = re.search(r"enum class NetworkDefinitionCreationFlag : int32_t\s*\{(.*?)\};", header, re.S).group(1)
    values = {name.removeprefix("k"): int(value) for name, value in re.findall(r"(k\w+)(?:\s+TRT_DEPRECATED_ENUM)?\s*=\s*(\d+)", body)}
    commit = subprocess.run(["git", "-C", repo, "rev-parse", f"{tag}^{{commit}}"], capture_output=True, text=True, check=True)
    commit = commit.stdout.strip()
    return {"tag": tag, "commit": commit, "classes": classes, "enums": enums, "module": sorted(module),
            "network_flag_values": values}


def main(argv: list[str]) -> int:
    repo, tag = argv[1], argv[2] if len(argv) > 2 else "v11.1"
    data = extract(repo, tag)
    print(f'"""TensorRT {tag.lstrip("v")}\'s builder-side Python API, as its binding sources declare it (generated: do not edit).\n')
    print(f"NVIDIA/TensorRT {tag} (commit {data['commit']}), python/src/infer/*.cpp and python/src/parsers/pyOnnx.cpp,")
    print("read by ``python -m suites.engines.tensorrt_api_extract REPO TAG`` (its doc says how). ``CLASSES``: Python class ->")
    print("member -> the keyword names of a method (None for a property); ``ENUMS``: enum -> members; ``MODULE``: module")
    print('attributes; ``NETWORK_FLAG_VALUES``: ``NetworkDefinitionCreationFlag`` values from include/NvInfer.h."""\n')
    print(f"TAG = {tag!r}")
    print(f"COMMIT = {data['commit']!r}")
    for name, key in (("CLASSES", "classes"), ("ENUMS", "enums"), ("MODULE", "module"), ("NETWORK_FLAG_VALUES", "network_flag_values")):
        print(f"{name} = {pprint.pformat(data[key], width=120, compact=True, sort_dicts=True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
