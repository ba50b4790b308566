"""The stall policy: what a run does when a pass of its input stalls, decided once.

Runners report a stalled pass (``StepResult.stall``); the engine asks
:class:`StallPolicy` what follows, for both loops alike.
"""

from __future__ import annotations

import logging

__all__ = ["StallPolicy"]

logger = logging.getLogger(__name__)


class StallPolicy:
    """What a run does when a pass of its input stalls: the one place that decides it.

    A runner reports a pass as stalled (``StepResult.stall``) when its read waited its
    bound while the input is alive: a tf.data service worker lost mid-epoch, whose share
    of the pass TensorFlow never ends. The engine then:

    - ends the pass there, and warns with the examples lost when the pass's size is
      known (:meth:`stalled`);
    - never learns ``steps_per_epoch`` from a stalled pass (it is shorter than a pass);
    - ends every later pass of known size at its size (:meth:`examples_left`): after a
      lost worker, TensorFlow 2.21's dispatcher gives every new job a task on it, whose
      end never comes, so a pass would otherwise wait its bound again every epoch;
    - goes on with the next epoch when the runner can restart the data, else ends the
      run with a ``ConnectionError`` (:meth:`check_restartable`).

    Args:
        epoch_examples: The examples of one pass of the training data, when the input
            knows them (its :class:`~tfr_hooks.tfrecord.pipelines.contract.ReadFacts`).

    Attributes:
        lost: Whether a pass of this run stalled.
    """

    def __init__(self, epoch_examples: int | None = None) -> None:
        self.epoch_examples = epoch_examples
        self.lost = False

    def examples_left(self, read: int) -> int | None:
        """The examples a training pass may still read, after ``read``; ``None``: no bound."""
        if not self.lost or self.epoch_examples is None:
            return None
        return max(self.epoch_examples - read, 0)

    def stalled(self, stall: str, what: str, read: int, *, training: bool = True) -> None:
        """Log that a pass (``what``: "epoch 3", "the validation pass") ends stalled.

        Args:
            stall: Why, as the runner reported it (names the service and the reason).
            what: The pass, for the log.
            read: The examples the pass read.
            training: Whether it is a training pass (its size may be known).
        """
        if training:
            self.lost = True
        lost = ""
        if training and self.epoch_examples is not None:
            missing = max(self.epoch_examples - read, 0)
            lost = f": {missing} of its {self.epoch_examples} examples were lost ({read} read)"
        logger.warning(
            "%s: %s ends here%s. The next pass reads from a new iterator.", stall, what, lost
        )

    @staticmethod
    def check_restartable(stall: str, restartable: bool) -> None:
        """Raise when a stalled training pass cannot be followed by a new one.

        Raises:
            ConnectionError: The runner cannot restart its data (a one-shot source, or
                epochs counted in steps on data that is started once).
        """
        if not restartable:
            raise ConnectionError(
                f"{stall}. The input stalled, and the loop cannot start its data again "
                "(epochs counted in steps, or a one-shot source): restart the service's "
                "servers and resume the run."
            )
