"""Hugging Face ``transformers`` models, built from their configs at tiny sizes with random weights.

Nothing is downloaded: each entry builds a config (hidden size 32, 2 layers, vocabulary 100, sequences of 16
tokens, 32 x 32 images), the model class from it, and a two-line wrapper module with positional inputs, the way
a user hands a Hugging Face model to ``torch.export``: ``(input_ids, attention_mask)`` for text, the mask
padding the second sequence from token 10 on, or ``(pixel_values,)`` for images. Outputs stay ``transformers``'
own output classes (``BaseModelOutput``, ``CausalLMOutputWithPast``...: pytree nodes), so the compiled module
returns what the model returns. Decoders run with ``use_cache=False``: a ``DynamicCache`` output is no pytree.

The architectures: encoder-only (BERT, DistilBERT, RoBERTa), decoder-only (GPT-2; Llama and Qwen2 with rotary
embeddings and grouped-query attention, 2 query heads per key/value head), an encoder-decoder's encoder (T5),
patch-embedding vision (ViT, CLIP's vision tower), convolutional vision (ConvNeXt), hierarchical windowed
vision (Swin) and a segmentation head (SegFormer); plus BERT with a dynamic sequence length
(``hf_bert_dynamic_seq``) and one Llama decoder step with its KV cache passed in and returned as tensors
(``hf_llama_decoder_step``). Each entry's ``fallback_module`` is an early block (layer), so the ``torch_module``
preset splits it in the middle.

``transformers`` is an optional extra (``pip install -e '.[hf]'``, also in ``dev``); it is imported when an
entry is built, not here (its model classes take seconds to import). Without it this module registers
nothing: ``HF_ZOO`` is ``()`` and ``HF_UNAVAILABLE`` says why.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.export import Dim

from .registry import ZooEntry, make_nontrivial, register, seeded

__all__ = ["HF_UNAVAILABLE", "HF_ZOO"]

BATCH, SEQ, VOCAB, IMAGE = 2, 16, 100, 32
PADDED_FROM = 10  # the second sequence's mask is 0 from this token on
# The tiny sizes every text config shares (each config names them its own way, see _SPECS).
_TEXT = {"vocab_size": VOCAB, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
_DECODER = {**_TEXT, "num_key_value_heads": 1, "bos_token_id": 0, "eos_token_id": 0}  # 2 query heads per KV head


class TextModel(nn.Module):
    """``model(input_ids=..., attention_mask=..., **options)`` with positional inputs: what a user writes."""

    def __init__(self, model: nn.Module, **options: Any) -> None:
        super().__init__()
        self.model = model
        self.options = options

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, **self.options)


class VisionModel(nn.Module):
    """``model(pixel_values=...)`` with a positional input."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: torch.Tensor) -> Any:
        return self.model(pixel_values=pixel_values)


class DecoderStep(nn.Module):
    """One decoding step with the KV cache passed in as tensors and the new cache returned as tensors.

    ``past_keys``/``past_values``: ``[layers, batch, kv_heads, past_length, head_dim]``. The ``DynamicCache``
    the model wants is built inside ``forward`` (export traces through it; as an input or output it is no
    pytree), its layers filled with the past tensors directly: ``DynamicCache(ddp_cache_data=...)`` would
    concatenate each onto an empty tensor, an op with an empty input that stays in PyTorch. The output is the
    model's own ``CausalLMOutputWithPast`` whose ``cache`` is ``(keys, values)``, each one tensor stacked over
    the layers, ``past_length + 1`` long.
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, past_keys: torch.Tensor,
                past_values: torch.Tensor) -> Any:
        from transformers import DynamicCache  # deferred: transformers is optional and slow to import

        cache = DynamicCache(config=self.model.config)
        for layer, keys, values in zip(cache.layers, past_keys.unbind(0), past_values.unbind(0)):
            layer.device, layer.keys, layer.values, layer.is_initialized = keys.device, keys, values, True
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, cache=cache, use_cache=True)
        keys = torch.stack([layer.keys for layer in out.cache.layers])
        values = torch.stack([layer.values for layer in out.cache.layers])
        return type(out)(logits=out.logits, cache=(keys, values))


@dataclass(frozen=True)
class _Spec:
    """One tiny architecture: ``transformers.<model>(transformers.<config>(**config))`` in a wrapper."""

    name: str
    model: str
    config: str
    options: dict[str, Any]
    kind: str  # "text" or "vision"
    fallback_module: str
    tags: tuple[str, ...] = ()
    call: dict[str, Any] = field(default_factory=dict)  # TextModel's extra keyword arguments


_SPECS: tuple[_Spec, ...] = (
    _Spec("hf_bert", "BertModel", "BertConfig", _TEXT, "text", "model.encoder.layer.0", ("encoder",)),
    _Spec("hf_distilbert", "DistilBertModel", "DistilBertConfig",
          {"vocab_size": VOCAB, "dim": 32, "n_layers": 2, "n_heads": 2, "hidden_dim": 64}, "text",
          "model.transformer.layer.0", ("encoder",)),
    _Spec("hf_roberta", "RobertaModel", "RobertaConfig", _TEXT, "text", "model.encoder.layer.0", ("encoder",)),
    _Spec("hf_gpt2", "GPT2LMHeadModel", "GPT2Config",
          {"vocab_size": VOCAB, "n_embd": 32, "n_layer": 2, "n_head": 2, "bos_token_id": 0, "eos_token_id": 0},
          "text", "model.transformer.h.0", ("decoder",), {"use_cache": False}),
    _Spec("hf_llama", "LlamaForCausalLM", "LlamaConfig", _DECODER, "text", "model.model.layers.0",
          ("decoder", "rotary", "gqa"), {"use_cache": False}),
    _Spec("hf_qwen2", "Qwen2ForCausalLM", "Qwen2Config", _DECODER, "text", "model.model.layers.0",
          ("decoder", "rotary", "gqa"), {"use_cache": False}),
    _Spec("hf_t5_encoder", "T5EncoderModel", "T5Config",
          {"vocab_size": VOCAB, "d_model": 32, "d_kv": 16, "d_ff": 64, "num_layers": 2, "num_heads": 2}, "text",
          "model.encoder.block.0", ("encoder",)),
    _Spec("hf_vit", "ViTModel", "ViTConfig", {**_TEXT, "vocab_size": None, "image_size": IMAGE, "patch_size": 8},
          "vision", "model.layers.0", ("patch_embedding",)),
    _Spec("hf_clip_vision", "CLIPVisionModel", "CLIPVisionConfig",
          {**_TEXT, "vocab_size": None, "image_size": IMAGE, "patch_size": 8}, "vision",
          "model.encoder.layers.0", ("patch_embedding",)),
    _Spec("hf_convnext", "ConvNextModel", "ConvNextConfig", {"hidden_sizes": [8, 16, 32, 64], "depths": [1, 1, 1, 1]},
          "vision", "model.encoder.stages.1.layers.0", ("convolutional",)),
    _Spec("hf_swin", "SwinModel", "SwinConfig",
          {"image_size": IMAGE, "patch_size": 4, "embed_dim": 16, "depths": [1, 1], "num_heads": [2, 2], "window_size": 4},
          "vision", "model.encoder.layers.0.blocks.0", ("hierarchical",)),
    _Spec("hf_segformer", "SegformerForSemanticSegmentation", "SegformerConfig",
          {"num_encoder_blocks": 2, "depths": [1, 1], "sr_ratios": [2, 1], "hidden_sizes": [16, 32],
           "num_attention_heads": [1, 2], "decoder_hidden_size": 32, "num_labels": 3}, "vision",
          "model.segformer.stages.0.blocks.0", ("segmentation",)),
)


def _text_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    attention_mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    attention_mask[1, PADDED_FROM:] = 0
    return input_ids, attention_mask


def _model(spec: _Spec) -> nn.Module:
    import transformers  # deferred: transformers is optional and slow to import

    options = {key: value for key, value in spec.options.items() if value is not None}
    config = getattr(transformers, spec.config)(**options)
    return getattr(transformers, spec.model)(config)


def _build(spec: _Spec) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The wrapped random-weight model and its example inputs; constant parameters (zero biases) re-drawn so
    that a converter that dropped one would show (``make_nontrivial``)."""
    model = _model(spec)
    if spec.kind == "text":
        wrapper: nn.Module = TextModel(model, **spec.call)
        inputs: tuple[torch.Tensor, ...] = _text_inputs()
    else:
        wrapper = VisionModel(model)
        inputs = (torch.randn(BATCH, 3, IMAGE, IMAGE),)
    make_nontrivial(wrapper, inputs)
    return wrapper, inputs


def _entry(spec: _Spec) -> ZooEntry:
    return ZooEntry(spec.name, seeded()(functools.partial(_build, spec)), ("hf", spec.kind, *spec.tags),
                    fallback_module=spec.fallback_module)


_BERT = _SPECS[0]


@seeded()
def _bert_dynamic_seq() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return _build(_BERT)


_LLAMA = _SPECS[4]
PAST = SEQ - 1  # the decoder step's cache length: the step's mask covers PAST + 1 tokens


@seeded()
def _llama_decoder_step() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    model = _model(_LLAMA)
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    past = (config.num_hidden_layers, BATCH, config.num_key_value_heads, PAST, head_dim)
    input_ids = torch.randint(0, VOCAB, (BATCH, 1))
    _, attention_mask = _text_inputs()  # the second sequence padded from token 10 of the 16 (past and new)
    step = DecoderStep(model)
    inputs = (input_ids, attention_mask, torch.randn(past), torch.randn(past))
    make_nontrivial(step, inputs)
    return step, inputs


def _entries() -> tuple[ZooEntry, ...]:
    seq = Dim("seq", min=2, max=64)
    return (
        *(_entry(spec) for spec in _SPECS),
        ZooEntry("hf_bert_dynamic_seq", _bert_dynamic_seq, ("hf", "text", "encoder", "dynamic_seq"),
                 fallback_module=_BERT.fallback_module, dynamic_shapes=({1: seq}, {1: seq})),
        ZooEntry("hf_llama_decoder_step", _llama_decoder_step, ("hf", "text", "decoder", "rotary", "gqa", "kv_cache"),
                 fallback_module=_LLAMA.fallback_module),
    )


#: Why there are no ``hf`` entries, or None when there are.
HF_UNAVAILABLE: str | None = (
    None if importlib.util.find_spec("transformers") is not None
    else "transformers is not installed, so no hf_* zoo entry is registered: pip install -e '.[hf]'"
)

HF_ZOO: tuple[str, ...] = () if HF_UNAVAILABLE else tuple(register(entry).name for entry in _entries())
