"""The public names: each listed once, each importable from the top-level package."""

from __future__ import annotations

import pytest

import tfr_hooks


def test_every_public_name_resolves_and_is_listed_once() -> None:
    assert len(tfr_hooks.__all__) == len(set(tfr_hooks.__all__))
    assert set(tfr_hooks.__all__) == set(tfr_hooks._PUBLIC) | {"__version__"}
    for name in tfr_hooks._PUBLIC:
        value = getattr(tfr_hooks, name)
        assert value is not None
        if not name[0].isupper() or name == "tfrecord":
            continue
        assert value.__name__ == name  # a class of that name, not a stand-in


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchThing'"):
        tfr_hooks.NoSuchThing  # noqa: B018
