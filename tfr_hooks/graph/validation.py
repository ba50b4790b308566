"""Validation: a second tensor-fed pipeline that ``SessionLoop.run`` runs after epochs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfr_hooks.checks import check_fetches, expected

__all__ = ["Validation"]


class Validation:
    """A second tensor-fed pipeline, the ``validation_data`` of ``SessionLoop.run``.

    Graph mode cannot hand the loop a dataset to run the model on: the model's
    validation call is built in the graph beforehand, on the validation batch tensors.
    A ``Validation`` carries what the loop needs to run it: the fetches, how to restart
    the data, and the batch size. How often and how long it runs are ``run``'s
    ``validation_freq`` and ``validation_steps``, as for ``FunctionLoop.run``.

    Args:
        fetches: Name to scalar tensor computed on the validation batch (sharing the
            model's weights); their means appear in the epoch logs as ``val_<name>``.
        initializers: Ops that restart the validation data (an initializable iterator's
            initializer); run before each pass, which then runs until the data ends.
            Without them, give ``run(validation_steps=...)``.
        batch_size: The validation batch size (a scalar tensor or an int), to weigh a
            final partial batch; ``None`` weighs every step equally.
        weights: Fetch name to the weight of its step, for fetches weighed otherwise
            than by ``batch_size``: a weighted mean's sum of example weights, so that the
            pass's value is the weighted mean over all its examples (as ``fit`` gives).

    Examples:
        >>> val = Validation({"loss": val_loss}, initializers=[it.initializer])  # doctest: +SKIP
        >>> loop = SessionLoop(train_op, {"loss": loss})  # doctest: +SKIP
        >>> loop.run(epochs=5, validation_data=val)  # doctest: +SKIP
    """

    def __init__(
        self,
        fetches: Mapping[str, Any],
        *,
        initializers: Sequence[Any] = (),
        batch_size: Any = None,
        weights: Mapping[str, Any] | None = None,
    ) -> None:
        check_fetches(fetches, "fetches")
        weights = dict(weights or {})
        unknown = sorted(set(weights) - set(fetches))
        if unknown:
            raise ValueError(
                expected("weights", f"a dict keyed by fetch names ({sorted(fetches)})", weights)
            )
        self.fetches = dict(fetches)
        self.initializers = list(initializers)
        self.batch_size = batch_size
        self.weights = weights
