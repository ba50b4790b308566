"""Validation: a second tensor-fed pipeline that ``SessionLoop.run`` runs after epochs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfr_hooks.checks import check_fetches

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
    ) -> None:
        check_fetches(fetches, "fetches")
        self.fetches = dict(fetches)
        self.initializers = list(initializers)
        self.batch_size = batch_size
