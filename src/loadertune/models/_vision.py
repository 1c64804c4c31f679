"""Networks over fixed-shape samples: an MLP, a small CNN and ResNet-18, in plain PyTorch.

ResNet-18 is written out here (torchvision does not import beside the CPU build of torch on
some machines): basic residual blocks in four stages of two, 64-128-256-512 channels at
``width=64``, 11.7 M parameters with 1000 classes, as in He et al. (2016). Its stem adapts to
the sample size: ImageNet's 7x7/2 convolution and max-pool for samples of 64 pixels or more,
CIFAR's single 3x3 convolution below that, where the ImageNet stem would shrink the image to
nothing.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor, nn

IMAGENET_STEM_MIN_SIDE = 64


def mlp(shape: tuple[int, ...], hidden: int, layers: int, classes: int) -> nn.Module:
    """Flatten, ``layers`` hidden ReLU layers of ``hidden`` units, a linear head."""
    width = math.prod(shape)
    modules: list[nn.Module] = [nn.Flatten()]
    for _ in range(layers):
        modules += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*modules, nn.Linear(width, classes))


def small_cnn(in_channels: int, channels: int, classes: int) -> nn.Module:
    """Three strided 3x3 convolutions (doubling channels), global pooling, a linear head."""
    c = channels
    return nn.Sequential(
        nn.Conv2d(in_channels, c, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(c, 2 * c, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(2 * c, 4 * c, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4 * c, classes),
    )


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with batch norm and a residual connection (1x1 when reshaping)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))  # type: ignore[no-any-return]


def resnet18(
    shape: tuple[int, ...], classes: int, width: int = 64, stem: str = "auto"
) -> nn.Module:
    """ResNet-18 for samples shaped (C, H, W); ``stem`` is ``auto``, ``imagenet`` or ``cifar``."""
    in_channels, h, w = shape
    if stem == "auto":
        stem = "imagenet" if min(h, w) >= IMAGENET_STEM_MIN_SIDE else "cifar"
    layers: list[nn.Module]
    if stem == "imagenet":
        layers = [
            nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, stride=2, padding=1),
        ]
    else:
        layers = [
            nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(inplace=True),
        ]
    cin = width
    for stage in range(4):
        cout = width * 2**stage
        for block in range(2):
            layers.append(BasicBlock(cin, cout, 2 if stage and not block else 1))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    net = nn.Sequential(*layers)
    net.apply(_init)
    return net


def _init(module: Any) -> None:
    if isinstance(module, nn.Conv2d):
        nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
