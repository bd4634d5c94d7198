"""The benchmark model zoo: the TASO/OCGGS benchmark graphs and a few torchvision CNNs, built
directly in the IR (weights have shapes only; attach data with ``Graph.with_params``).

>>> from graphsub import zoo
>>> g = zoo.get("resnet", blocks=2)
>>> g.name, g.num_ops
('resnet', 10)
>>> zoo.MODELS["inception_v3"].expected_ops
138
>>> "bert_corrected" in zoo.list_models()
True

Families: ``"taso"`` -- the peers' benchmarks, reproduced from the OCGGS/TASO example
scripts (op counts as in their tables); ``"torchvision"`` --
classic CNNs shaped like torchvision's ONNX exports (including the layer-fusion CNNs of
:mod:`graphsub.zoo.fusion_cnns`).  Tags: ``cnn``, ``rnn``, ``transformer``, ``sized`` (has a
size parameter), ``fusion`` (the CNNs of the layer-fusion experiments, issue 9).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from graphsub.errors import GraphsubError
from graphsub.ir.graph import Graph
from graphsub.zoo.bert import bert
from graphsub.zoo.fusion_cnns import (
    deeplabv3_mobilenet_v3_large,
    efficientnet_b0,
    efficientnet_b3,
    mobilenet_v2,
    mobilenet_v3_large,
    mobilenet_v3_small,
    resnet101,
    resnet152,
)
from graphsub.zoo.nasnet import nasnet_a
from graphsub.zoo.rnn import nasrnn, sru
from graphsub.zoo.taso_cnn import inception_e, inception_v3, resnet, resnext50
from graphsub.zoo.torchvision_cnn import alexnet, resnet18, resnet50, squeezenet, vgg16, vgg19


class ZooError(GraphsubError):
    """An unknown model name or an invalid model parameter."""


@dataclass(frozen=True)
class ZooModel:
    """One zoo entry.

    ``builder(**params)`` builds the graph; ``expected_ops`` is ``num_ops`` of that graph
    with the default ``params``; ``family`` is ``"taso"`` or ``"torchvision"``.
    """

    name: str
    builder: Callable[..., Graph]
    description: str
    expected_ops: int
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    family: str = "taso"
    tags: tuple[str, ...] = ()

    def build(self, **kwargs: Any) -> Graph:
        """Build with the default ``params`` overridden by ``kwargs`` (validated)."""
        accepted = set(inspect.signature(self.builder).parameters)
        unknown = sorted(set(kwargs) - accepted)
        if unknown:
            raise ZooError(
                f"model {self.name!r} has no parameter(s) {unknown}; "
                f"accepted: {sorted(accepted) or 'none'}"
            )
        try:
            return self.builder(**{**self.params, **kwargs})
        except ValueError as e:
            raise ZooError(f"model {self.name!r}: {e}") from e


def _m(
    name: str,
    builder: Callable[..., Graph],
    description: str,
    expected_ops: int,
    family: str,
    tags: tuple[str, ...],
    **params: Any,
) -> ZooModel:
    return ZooModel(
        name, builder, description, expected_ops, MappingProxyType(params), family, tags
    )


_ENTRIES = (
    _m("inception_v3", inception_v3, "Inception-v3, OCGGS script (binary concat trees)",
       138, "taso", ("cnn",)),
    _m("inception_e", inception_e, "chained Inception-E blocks on (1,1280,8,8); 13 ops/block",
       39, "taso", ("cnn", "sized"), blocks=3),
    _m("resnet", resnet, "OCGGS ResNet blocks on (1,256,14,14); 5 ops/block",
       40, "taso", ("cnn", "sized"), blocks=8),
    _m("resnext50", resnext50, "ResNeXt-50 (32 groups), TASO/OCGGS script",
       86, "taso", ("cnn",)),
    _m("nasnet_a", nasnet_a, "NASNet-A, TASO/OCGGS script (paper table says 293 = 383 - 90)",
       383, "taso", ("cnn",)),
    _m("sru", sru, "SRU unrolled over `length` steps (1024 wide); 11 ops/step",
       11, "taso", ("rnn", "sized"), length=1),
    _m("nasrnn", nasrnn, "NASRNN cell unrolled over `length` steps (512 wide); 46 ops/step",
       230, "taso", ("rnn", "sized"), length=5),
    _m("bert", bert, "8 attention layers (64x1024, 16 heads); the peers' graph with its "
       "dead attention branches kept as outputs", 113, "taso", ("transformer",),
       variant="faithful"),
    _m("bert_corrected", bert, "8 attention layers (64x1024, 16 heads); attention feeds "
       "the output projection through softmax(q k^T / 8) v", 129, "taso", ("transformer",), variant="corrected"),
    _m("squeezenet", squeezenet, "SqueezeNet 1.0 (torchvision structure)",
       65, "torchvision", ("cnn", "fusion"), batchnorm=False),
    _m("vgg16", vgg16, "VGG-16 (torchvision structure)", 38, "torchvision", ("cnn", "fusion"),
       batchnorm=False),
    _m("vgg19", vgg19, "VGG-19 (torchvision structure)", 44, "torchvision", ("cnn",),
       batchnorm=False),
    _m("alexnet", alexnet, "AlexNet (torchvision structure)", 20, "torchvision", ("cnn",),
       batchnorm=False),
    _m("resnet18", resnet18, "ResNet-18 (torchvision structure)", 49, "torchvision",
       ("cnn", "fusion"), batchnorm=False),
    _m("resnet50", resnet50, "ResNet-50 v1.5 (torchvision structure)", 122, "torchvision",
       ("cnn", "fusion"), batchnorm=False),
    # layer-fusion CNNs (issue 9): torchvision recipes, BN folded, the paper's input sizes
    _m("resnet101", resnet101, "ResNet-101 v1.5 (torchvision structure)", 241, "torchvision",
       ("cnn", "fusion")),
    _m("resnet152", resnet152, "ResNet-152 v1.5 (torchvision structure)", 360, "torchvision",
       ("cnn", "fusion")),
    _m("mobilenet_v2", mobilenet_v2, "MobileNetV2 (torchvision structure, BN folded)", 100,
       "torchvision", ("cnn", "fusion", "sized"), image_size=224),
    _m("mobilenet_v3_small", mobilenet_v3_small, "MobileNetV3-Small (torchvision, BN folded)", 122,
       "torchvision", ("cnn", "fusion", "sized"), image_size=224),
    _m("mobilenet_v3_large", mobilenet_v3_large, "MobileNetV3-Large (torchvision, BN folded)", 140,
       "torchvision", ("cnn", "fusion", "sized"), image_size=224),
    _m("efficientnet_b0", efficientnet_b0, "EfficientNet-B0 (torchvision, BN folded)", 239,
       "torchvision", ("cnn", "fusion", "sized"), image_size=224),
    _m("efficientnet_b3", efficientnet_b3, "EfficientNet-B3 at 300x300 (torchvision, BN folded)", 386,
       "torchvision", ("cnn", "fusion", "sized"), image_size=300),
    _m("deeplabv3_mobilenet_v3_large", deeplabv3_mobilenet_v3_large,
       "DeepLabV3 + dilated MobileNetV3-Large at 513x513 (torchvision, no aux head)", 154,
       "torchvision", ("cnn", "fusion", "sized"), image_size=513, num_classes=21),
)

#: All models by name.
MODELS: Mapping[str, ZooModel] = MappingProxyType({m.name: m for m in _ENTRIES})


def list_models(family: str | None = None, tag: str | None = None) -> list[str]:
    """Model names (registry order), optionally only one family and/or tag."""
    return [
        m.name
        for m in MODELS.values()
        if (family is None or m.family == family) and (tag is None or tag in m.tags)
    ]


def get(name: str, **kwargs: Any) -> Graph:
    """Build model ``name``; ``kwargs`` override its default parameters
    (e.g. ``get("resnet", blocks=4)``, ``get("resnet50", batchnorm=True)``).

    Raises :class:`ZooError` for an unknown name (listing the known ones) or parameter.
    """
    model = MODELS.get(name)
    if model is None:
        raise ZooError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    return model.build(**kwargs)


__all__ = [
    "MODELS",
    "ZooError",
    "ZooModel",
    "alexnet",
    "bert",
    "deeplabv3_mobilenet_v3_large",
    "efficientnet_b0",
    "efficientnet_b3",
    "get",
    "inception_e",
    "inception_v3",
    "list_models",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "mobilenet_v3_small",
    "nasnet_a",
    "nasrnn",
    "resnet",
    "resnet18",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50",
    "squeezenet",
    "sru",
    "vgg16",
    "vgg19",
]
