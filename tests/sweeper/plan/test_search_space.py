"""Hydra sweep grammar to Optuna distributions: one table row per grammar form."""

from __future__ import annotations

from typing import Any

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Transformer
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from hydra_plugins.loadertune_sweeper.plan._search_space import (
    continuous_keys,
    distribution_from_override,
    grid_search_space,
    parse_params,
)

C = CategoricalDistribution
F = FloatDistribution
I = IntDistribution  # noqa: E741


def _parse(line: str) -> BaseDistribution:
    return distribution_from_override(OverridesParser.create().parse_overrides([line])[0])


def _assert_same(actual: BaseDistribution, expected: BaseDistribution) -> None:
    """Equal, of the same class, and categorical choices of the same types (True != 1)."""
    assert type(actual) is type(expected)
    assert actual == expected, f"{actual} != {expected}"
    if isinstance(expected, CategoricalDistribution):
        assert isinstance(actual, CategoricalDistribution)
        assert [type(c) for c in actual.choices] == [type(c) for c in expected.choices]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # choice: always categorical, in the written order, even for integers.
        ("k=choice(1,2)", C([1, 2])),
        ("k=choice(16,64,256)", C([16, 64, 256])),
        ("k=choice(true,false)", C([True, False])),
        ("k=choice('hello world',x)", C(["hello world", "x"])),
        ("k=choice(1,2.5,a,true)", C([1, 2.5, "a", True])),
        ("k=choice([1,2],[3])", C(["[1,2]", "[3]"])),
        ("k=1,2,3", C([1, 2, 3])),
        ("k=str(choice(1,2))", C(["1", "2"])),
        # shuffle: categorical in the written order, so a stored study can be resumed.
        ("k=shuffle(choice(c,a,b))", C(["c", "a", "b"])),
        ("k=shuffle(range(1,4))", C([1, 2, 3])),
        # range: Hydra's stop is exclusive, Optuna's high inclusive.
        ("k=range(0,8)", I(0, 7)),
        ("k=range(0,8,2)", I(0, 6, step=2)),
        ("k=range(1,10,3)", I(1, 7, step=3)),
        ("k=range(0,9,2)", I(0, 8, step=2)),
        ("k=range(10)", I(0, 9)),
        ("k=range(1,2)", I(1, 1)),
        ("k=range(5,0,-1)", I(1, 5)),
        ("k=range(8,0,-3)", I(2, 8, step=3)),
        ("k=tag(log,range(1,8))", I(1, 7, log=True)),
        # float range: stepped float, end points exact in decimal.
        ("k=range(0.5,5.5,1)", F(0.5, 4.5, step=1.0)),
        ("k=range(0,1,step=0.25)", F(0.0, 0.75, step=0.25)),
        ("k=range(0,1.0,0.3)", F(0.0, 0.9, step=0.3)),
        ("k=range(0.1,0.5,0.1)", F(0.1, 0.4, step=0.1)),
        # Hydra's float iteration also yields the excluded stop 0.4 here; we do not.
        ("k=range(0.1,0.4,0.1)", F(0.1, 0.3, step=0.1)),
        ("k=range(1.0,0.0,-0.25)", F(0.25, 1.0, step=0.25)),
        ("k=float(range(1,4))", F(1.0, 3.0, step=1.0)),
        # interval: float unless cast to int; both ends included.
        ("k=interval(1,5)", F(1.0, 5.0)),
        ("k=interval(0.5,2.5)", F(0.5, 2.5)),
        ("k=int(interval(1,5))", I(1, 5)),
        ("k=tag(log,interval(1e-4,0.1))", F(1e-4, 0.1, log=True)),
        ("k=tag(log,int(interval(1,64)))", I(1, 64, log=True)),
        ("k=tag(log, int(interval(1, 64)))", I(1, 64, log=True)),
        # add prefixes do not change the distribution.
        ("+k=choice(1,2)", C([1, 2])),
        ("++k=range(0,3)", I(0, 2)),
    ],
)
def test_distribution_from_override(line: str, expected: BaseDistribution) -> None:
    _assert_same(_parse(line), expected)


@pytest.mark.parametrize(
    "sweep",
    [
        "range(0,8)",
        "range(0,8,2)",
        "range(1,10,3)",
        "range(5,0,-1)",
        "range(0.5,5.5,1)",
        "range(0,1,0.3)",
        "range(0.1,0.5,0.1)",
        "range(-1,1,0.4)",
        "range(2,3,0.05)",
    ],
)
def test_range_covers_exactly_what_hydra_yields(sweep: str) -> None:
    """The distribution's values are the values Hydra's basic sweeper would run, no more.

    (Float ranges whose stop Hydra wrongly includes by rounding are pinned in the table above.)
    """
    override = OverridesParser.create().parse_overrides([f"k={sweep}"])[0]
    yielded = list(override.sweep_iterator(transformer=Transformer.encode))
    hydra_values = sorted(v for v in yielded if isinstance(v, (int, float)))
    assert len(hydra_values) == len(yielded)
    optuna_values = grid_search_space({"k": distribution_from_override(override)})["k"]
    assert optuna_values == pytest.approx(hydra_values, abs=1e-12)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("loader.batch_size=range(0,8,0)", r"loader\.batch_size=range\(0,8,0\): .*must not be 0"),
        ("loader.batch_size=range(8,0)", r"loader\.batch_size=.*yields no values"),
        ("loader.batch_size=range(0,8,-1)", r"loader\.batch_size=.*yields no values"),
        ("loader.batch_size=range(0,0)", r"loader\.batch_size=.*yields no values"),
        ("dataset=glob(a*)", r"dataset=glob\(a\*\): .*not supported.*choice"),
        ("lr=tag(log,interval(0,1))", r"lr=.*low > 0"),
        ("lr=tag(lgo,interval(1,2))", r"lr=.*unknown tag.*'lgo'"),
        ("lr=interval(5,1)", r"lr=interval\(5,1\): .*low <= high"),
        ("n=tag(log,range(1,64,2))", r"n=tag\(log,range\(1,64,2\)\): .*step"),
        ("n=tag(log,choice(1,2))", r"n=.*tag\(log, \.\.\.\) applies to interval"),
        ("n=shuffle(tag(log,range(1,3)))", r"n=.*tag\(log, \.\.\.\) applies to interval"),
        ("~loader.pin_memory", r"loader\.pin_memory.*deleting a key is not supported"),
        ("loader.num_workers=choice(", r"loader\.num_workers: cannot parse"),
    ],
)
def test_unsupported_grammar_names_the_key(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_params(None, [line])


def test_params_errors_name_the_config_key() -> None:
    with pytest.raises(ValueError, match=r"loader\.num_workers=range\(4,4\).*yields no values"):
        parse_params({"loader.num_workers": "range(4,4)"}, [])


def test_plain_value_is_not_a_distribution() -> None:
    with pytest.raises(ValueError, match=r"batch_size=32 is a fixed value, not a sweep"):
        _parse("batch_size=32")


@pytest.mark.parametrize(
    ("params", "overrides", "space", "fixed"),
    [
        (None, [], {}, {}),
        (None, ["key=choice(1,2)"], {"key": C([1, 2])}, {}),
        (None, ["key=5"], {}, {"key": "5"}),
        # Value text keeps quotes and brackets, so Hydra parses it back to the same value.
        (None, ["key='5'", "lst=[1,2]"], {}, {"key": "'5'", "lst": "[1,2]"}),
        (
            None,
            ["key1=choice(1,2)", "key2=5", "key3=range(1,3)"],
            {"key1": C([1, 2]), "key3": I(1, 2)},
            {"key2": "5"},
        ),
        (
            {"a": "choice(1,2)", "b": "range(0,4)", "c": "7"},
            [],
            {"a": C([1, 2]), "b": I(0, 3)},
            {"c": "7"},
        ),
        # The command line wins over params, whether it sweeps or fixes the key.
        ({"a": "choice(1,2)"}, ["a=choice(3,4)"], {"a": C([3, 4])}, {}),
        ({"a": "choice(1,2)"}, ["a=3"], {}, {"a": "3"}),
        ({"a": "7"}, ["a=interval(0,1)"], {"a": F(0.0, 1.0)}, {}),
        # +a and a are the same config key; the winner keeps its prefix.
        ({"a": "choice(1,2)"}, ["+a=3"], {}, {"+a": "3"}),
        ({"+w": "interval(0,1)"}, [], {"+w": F(0.0, 1.0)}, {}),
        # Within the command line, the later override wins.
        (None, ["a=choice(1,2)", "a=range(0,3)"], {"a": I(0, 2)}, {}),
        # Keys of other params are untouched by a command-line override.
        (
            {"a": "choice(1,2)", "b": "interval(0,1)"},
            ["b=0.5", "c=x"],
            {"a": C([1, 2])},
            {"b": "0.5", "c": "x"},
        ),
    ],
)
def test_parse_params(
    params: dict[str, str] | None,
    overrides: list[str],
    space: dict[str, BaseDistribution],
    fixed: dict[str, Any],
) -> None:
    actual_space, actual_fixed = parse_params(params, overrides)
    assert actual_fixed == fixed
    assert actual_space.keys() == space.keys()
    for key, distribution in space.items():
        _assert_same(actual_space[key], distribution)


@pytest.mark.parametrize(
    ("distribution", "values"),
    [
        (C(["a", "b"]), ["a", "b"]),
        (C([16, 64, 256]), [16, 64, 256]),
        (I(0, 6, step=2), [0, 2, 4, 6]),
        (I(1, 7, step=3), [1, 4, 7]),
        (I(3, 3), [3]),
        (I(1, 8, log=True), [1, 2, 3, 4, 5, 6, 7, 8]),
        (F(0.0, 0.9, step=0.3), [0.0, 0.3, 0.6, 0.9]),
        (F(0.1, 0.4, step=0.1), [0.1, 0.2, 0.3, 0.4]),
        (F(0.5, 4.5, step=1.0), [0.5, 1.5, 2.5, 3.5, 4.5]),
    ],
)
def test_grid_search_space_values(distribution: BaseDistribution, values: list[Any]) -> None:
    # Exact equality on purpose: grid values must sit exactly on the distribution's steps.
    assert grid_search_space({"k": distribution}) == {"k": values}


@pytest.mark.parametrize(
    "distribution", [F(0.0, 1.0), F(1e-4, 1.0, log=True)], ids=["uniform", "log"]
)
def test_grid_search_space_refuses_continuous(distribution: BaseDistribution) -> None:
    space = {"batch_size": C([32, 64]), "loader.lr": distribution}
    with pytest.raises(ValueError, match=r"loader\.lr: .*continuous.*choice\(\.\.\.\).*range"):
        grid_search_space(space)


def test_continuous_keys() -> None:
    space = {
        "a": F(0.0, 1.0),
        "b": F(0.0, 1.0, step=0.5),
        "c": I(0, 3),
        "d": C([1]),
        "e": F(1.0, 2.0, log=True),
    }
    assert continuous_keys(space) == ["a", "e"]
