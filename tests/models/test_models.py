"""Models: ResNet-18 and a GPT-style transformer that are the real thing, sized to the sample;
pairs that cannot work refused before anything is built, naming the model and the dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from loadertune import run_trial
from loadertune.checks._validation import validate
from loadertune.config._typed import ResNet18Config, TransformerConfig, to_run_config
from loadertune.errors import ConfigError
from loadertune.models import build_train_step, check_model
from loadertune.models._steps import RealStep
from loadertune.models._transformer import TokenTransformer, next_token_loss
from loadertune.models._vision import resnet18
from tests.conftest import Compose
from tests.window import assert_whole_window

TOKENS = ["dataset=tokens", "dataset.count=4000", "dataset.seq_len=16", "dataset.vocab_size=100"]
TINY_GPT = ["model=transformer", "model.layers=1", "model.d_model=16", "model.heads=2"]


def _params(net: torch.nn.Module) -> int:
    return sum(p.numel() for p in net.parameters())


def test_resnet18_has_resnet18s_parameters() -> None:
    # torchvision's resnet18(num_classes=1000) has 11,689,512 parameters.
    assert _params(resnet18((3, 224, 224), 1000)) == 11_689_512


@pytest.mark.parametrize(
    ("shape", "stem", "first_kernel"),
    [
        ((3, 224, 224), "auto", 7),
        ((3, 64, 64), "auto", 7),
        ((3, 32, 32), "auto", 3),
        ((1, 96, 80), "cifar", 3),
    ],
)
def test_resnet18_stem_adapts_to_the_sample(
    shape: tuple[int, int, int], stem: str, first_kernel: int
) -> None:
    net = resnet18(shape, 5, width=4, stem=stem)
    first = net[0]
    assert isinstance(first, torch.nn.Conv2d)
    assert first.kernel_size == (first_kernel, first_kernel)
    assert first.in_channels == shape[0]
    assert net(torch.zeros(2, *shape)).shape == (2, 5)


def test_transformer_is_causal_and_learns() -> None:
    torch.manual_seed(0)
    net = TokenTransformer(vocab_size=50, seq_len=12, layers=2, d_model=32, heads=4, mlp_ratio=4)
    ids = torch.randint(0, 50, (4, 12))
    changed = ids.clone()
    changed[:, 8:] = (changed[:, 8:] + 1) % 50
    assert torch.allclose(net(ids)[:, :8], net(changed)[:, :8], atol=1e-5)  # no peeking ahead
    assert not torch.allclose(net(ids)[:, 8:], net(changed)[:, 8:])
    # embedding tied to the head: 50*32 + positions 12*32 + 2 blocks + final norm
    block = 4 * 32 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32)
    assert _params(net) == 50 * 32 + 12 * 32 + 2 * block + 2 * 32
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = next_token_loss(net(ids), ids, None)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


# ---- every model through a trial ----------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        ["model=resnet18", "model.width=4"],
        [*TOKENS, *TINY_GPT],
        [*TOKENS, "model=mlp"],
        [*TOKENS, "model=simulated", "model.step_ms=1"],
    ],
)
def test_every_model_runs_a_trial(compose: Compose, overrides: list[str]) -> None:
    result = run_trial(to_run_config(compose(overrides)))
    assert_whole_window(result, steps=4, batch_size=4)
    assert result.summary.compute_ms_mean > 0


# ---- pairs that cannot work -----------------------------------------------------------------

BAD_PAIRS = [
    (
        ["model=transformer"],
        "model.name=transformer: needs token sequences",
        "dataset=synthetic_images yields float32 images",
    ),
    (
        [*TOKENS, "model=resnet18"],
        "model.name=resnet18: needs image samples",
        "dataset=tokens yields int64 token sequences",
    ),
    (
        [*TOKENS, "model=small_cnn"],
        "model.name=small_cnn: needs image samples",
        "model=transformer with dataset=tokens",
    ),
    (
        ["dataset=array_shards", "dataset.sample_shape=[1024]", "model=resnet18"],
        "model.name=resnet18: needs image samples",
        "dataset=array_shards yields uint8 arrays shaped (1024,)",
    ),
    (
        [
            "dataset=array_shards",
            "dataset.dtype=float32",
            "dataset.sample_shape=[64]",
            "model=transformer",
        ],
        "model.name=transformer: needs token sequences",
        "float32 arrays",
    ),
]


@pytest.mark.parametrize(("overrides", "prefix", "detail"), BAD_PAIRS)
def test_impossible_pairs_are_refused_before_anything_is_built(
    compose: Compose, tmp_path: Path, overrides: list[str], prefix: str, detail: str
) -> None:
    config = to_run_config(compose(overrides))
    with pytest.raises(ConfigError) as info:
        validate(config)
    message = str(info.value)
    assert message.startswith(prefix)
    assert detail in message and "Fix: " in message
    with pytest.raises(ConfigError, match=prefix.replace(".", r"\.")):
        run_trial(config)
    assert not (tmp_path / "datasets").exists()  # refused before generating anything


@pytest.mark.parametrize("model", ["resnet18", "transformer"])
def test_custom_dataset_is_checked_on_its_first_sample(
    compose: Compose, fixtures_on_path: Path, model: str
) -> None:
    config = to_run_config(
        compose(["dataset=custom", "dataset._target_=user_data.RandomVectors", f"model={model}"])
    )
    with pytest.raises(
        ConfigError,
        match=rf"^model\.name={model}: needs .* dataset=custom yields float32 tensors "
        r"shaped \(8,\)",
    ):
        run_trial(config)


def test_transformer_needs_a_vocabulary_size() -> None:
    sample = (torch.arange(8), torch.arange(1, 9))
    cfg = TransformerConfig(layers=1, d_model=8, heads=2)
    with pytest.raises(ConfigError, match=r"^model\.vocab_size=null: is needed: dataset=custom"):
        build_train_step(cfg, sample, 10, torch.device("cpu"), "custom")
    with pytest.raises(ConfigError, match=r"^model\.vocab_size=50: is smaller than dataset=tokens"):
        build_train_step(
            TransformerConfig(vocab_size=50, d_model=8, heads=2),
            sample,
            10,
            torch.device("cpu"),
            "tokens",
            100,
        )
    step = build_train_step(
        TransformerConfig(vocab_size=20, layers=1, d_model=8, heads=2),
        sample,
        10,
        torch.device("cpu"),
        "custom",
    )
    # Given a vocabulary, the step is built for it and trains: one step moves the weights.
    assert isinstance(step, RealStep)
    assert isinstance(step.network, TokenTransformer) and step.network.tok.num_embeddings == 20
    before = [p.detach().clone() for p in step.network.parameters()]
    step((torch.stack([sample[0]] * 2), torch.stack([sample[1]] * 2)))
    after = list(step.network.parameters())
    assert any(not torch.equal(b, a) for b, a in zip(before, after, strict=True))


BAD_MODELS = [
    (
        TransformerConfig(d_model=30, heads=4),
        "model.d_model=30: must be a positive multiple of model.heads=4",
    ),
    (TransformerConfig(layers=0), "model.layers=0: must be >= 1"),
    (TransformerConfig(vocab_size=1), "model.vocab_size=1: must be >= 2"),
    (TransformerConfig(lr=0.0), "model.lr=0.0: must be > 0"),
    (ResNet18Config(width=0), "model.width=0: must be >= 1"),
    (ResNet18Config(stem="vgg"), "model.stem=vgg: is not a stem"),
]


@pytest.mark.parametrize(("cfg", "prefix"), BAD_MODELS)
def test_bad_model_knobs_name_the_key(cfg: object, prefix: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_model(cfg)  # type: ignore[arg-type]
    assert str(info.value).startswith(prefix)
