"""Validation: a second tensor-fed pipeline that a ``SessionLoop`` runs after epochs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tfr_hooks.checks import check_fetches, check_optional_positive_int, check_positive_int

__all__ = ["Validation"]


class Validation:
    """A second tensor-fed pipeline, run to exhaustion at the end of training epochs.

    Args:
        fetches: Name to scalar tensor computed on the validation batch (sharing the
            model's weights); their means appear in the epoch logs as ``val_<name>``.
        initializers: Ops that restart the validation data (an initializable iterator's
            initializer); run before each pass. Without them, give ``steps``.
        batch_size: The validation batch size (a scalar tensor or an int), to weigh a
            final partial batch; ``None`` weighs every step equally.
        steps: Stop each pass after this many steps; ``None`` runs until the data ends.
        freq: Run the pass after every ``freq``-th epoch, counted as ``model.fit``
            counts ``validation_freq`` (after epochs ``freq - 1``, ``2 * freq - 1``, ...).

    Examples:
        >>> val = Validation({"loss": val_loss}, initializers=[it.initializer])  # doctest: +SKIP
        >>> SessionLoop(train_op, {"loss": loss}, validation=val)  # doctest: +SKIP
    """

    def __init__(
        self,
        fetches: Mapping[str, Any],
        *,
        initializers: Sequence[Any] = (),
        batch_size: Any = None,
        steps: int | None = None,
        freq: int = 1,
    ) -> None:
        check_fetches(fetches, "fetches")
        check_optional_positive_int(steps, "steps")
        check_positive_int(freq, "freq")
        if not initializers and steps is None:
            raise ValueError(
                "Expected `initializers` or `steps` to be given: a validation pipeline "
                "without initializers can only be run once, so give `initializers` (an "
                "initializable iterator's initializer) or `steps`. "
                f"Received: initializers={initializers!r}, steps={steps!r}"
            )
        self.fetches = dict(fetches)
        self.initializers = list(initializers)
        self.batch_size = batch_size
        self.steps = steps
        self.freq = freq
