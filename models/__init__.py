"""trtcheck's model zoo: named, deterministic, random-weight models for checking partitioned runs.

    import trtcheck_zoo as models
    entry = models.get("resnet18")
    model, example_inputs = entry.factory()
    for name in models.names("mobilenet*"): ...
    models.names(tags=["fallback"])  # the hand-written fallback models

Importing the package registers the torchvision models, the hand-written models and, where ``transformers``
is installed (the ``hf`` extra), the tiny Hugging Face models; where ``nvidia-modelopt`` is (the ``quant`` extra), the
quantized models, which only a pattern naming them selects (``names("quantized_*")``); torchvision's detectors
(``detection_models``: torch.export refuses them, verified through torch.compile), one of them by default;
``models.register`` adds more (say, a user's own model) under a new name.
"""

# Import order is registration order, which ``names()`` reports: torchvision first.
from .registry import Factory, ZooEntry, get, make_nontrivial, names, register, seeded

from .torchvision_models import TORCHVISION_ZOO  # isort: skip
from .fallback_models import FALLBACK_ZOO  # isort: skip
from .correctness_models import CORRECTNESS_ZOO  # isort: skip
from .dynamic_models import DYNAMIC_ZOO  # isort: skip
from .control_flow_models import CONTROL_FLOW_ZOO  # isort: skip
from .user_models import USER_ZOO  # isort: skip
from .hf_models import HF_UNAVAILABLE, HF_ZOO  # isort: skip
from .quantized_models import QUANTIZED_UNAVAILABLE, QUANTIZED_ZOO, base_model  # isort: skip
from .detection_models import DETECTION_DEFAULT, DETECTION_ZOO  # isort: skip

# Every built-in entry, torchvision first. Filter by tag to skip the slow ones: names(exclude_tags=["heavy"]).
DEFAULT_ZOO: tuple[str, ...] = (TORCHVISION_ZOO + FALLBACK_ZOO + CORRECTNESS_ZOO + DYNAMIC_ZOO + CONTROL_FLOW_ZOO + USER_ZOO + HF_ZOO
                                + DETECTION_DEFAULT)

__all__ = [
    "CONTROL_FLOW_ZOO",
    "CORRECTNESS_ZOO",
    "DEFAULT_ZOO",
    "DETECTION_DEFAULT",
    "DETECTION_ZOO",
    "DYNAMIC_ZOO",
    "FALLBACK_ZOO",
    "HF_UNAVAILABLE",
    "HF_ZOO",
    "QUANTIZED_UNAVAILABLE",
    "QUANTIZED_ZOO",
    "TORCHVISION_ZOO",
    "USER_ZOO",
    "Factory",
    "ZooEntry",
    "base_model",
    "get",
    "names",
    "make_nontrivial",
    "register",
    "seeded",
]
