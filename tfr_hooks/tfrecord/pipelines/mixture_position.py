"""A mixture's position: where its next pass starts, and the stretch of weights it reads.

A mixture read (``weights=``) seeks as any read with a position
(:class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`: the pass's epoch and its
records done), whatever its ``num_epochs``: pass ``p`` (a loop's epoch) is the ``span``
global positions from ``p * span``, ``span`` being ``num_epochs`` epochs of the mixture
(``num_epochs * E``, ``E``:
:attr:`~tfr_hooks.tfrecord.pipelines.mixture.MixtureOrder.epoch_size`; a huge constant
for ``num_epochs=None``). Beside them, :class:`MixturePosition` keeps the **stretch**
its passes read: the reader's own weights from a global position on, each source
continuing at the draws it had reached there
(:meth:`~tfr_hooks.tfrecord.pipelines.mixture.MixtureState.reweighted`). A new read is
one stretch from position 0, and global position ``k = epoch * span + records``.

**Weights changed at a checkpoint.** A checkpoint saves :meth:`MixturePosition.input_state`
beside the loop's position: the whole
:class:`~tfr_hooks.tfrecord.pipelines.mixture.MixtureState` (every stretch's weights,
so earlier positions stay reproducible) and the ``offset`` from the loop's positions to
the global ones (a few dozen bytes a source and stretch). A run restarted from it with
other ``weights=`` seeks with that state (:meth:`MixturePosition.seek`): the global
position ``k`` where the run stopped is the saved run's ``epoch * span + records +
offset``; the state is reweighted there (each kept source goes on from the record where
it stopped, so none repeats within its epoch; an added source starts at its beginning,
or where an earlier stretch left it; a removed one is dropped), and the reader's passes
read its last stretch from ``k`` on, at the new weights. A pass of the run is then
``span`` positions of the new sources, counted on from ``k``: ``offset`` is ``k`` minus
the new ``epoch * span + records``. The same weights and sources go on with the saved state
unchanged.

The stretch lives in one ``int64`` variable (``[offset, start, draws of each source]``),
read when a pass starts, as the epoch and records are; nothing else of the pipeline
changes, so a seek costs the same wherever it lands.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from tfr_hooks.tfrecord.pipelines.mixture import MixtureState
from tfr_hooks.tfrecord.pipelines.position import ReadPosition

__all__ = ["MixturePosition", "decode_input_state", "encode_input_state"]

logger = logging.getLogger(__name__)


def encode_input_state(state: MixtureState, offset: int, span: int) -> bytes:
    """A mixture's input state as compact JSON bytes: its stretches, offset and pass span."""
    rows = json.loads(state.to_bytes().decode("utf-8"))
    saved = {"offset": int(offset), "span": int(span), "mixture": rows}
    return json.dumps(saved, separators=(",", ":")).encode("utf-8")


def decode_input_state(data: bytes) -> tuple[MixtureState, int, int]:
    """The ``(state, offset, span)`` that :func:`encode_input_state` saved.

    Raises:
        ValueError: ``data`` is not a mixture's input state.
    """
    try:
        saved = json.loads(bytes(data).decode("utf-8"))
        rows, offset, span = saved["mixture"], int(saved["offset"]), int(saved["span"])
        state = MixtureState.from_bytes(json.dumps(rows).encode("utf-8"))
    except (ValueError, KeyError, TypeError, IndexError) as error:
        raise ValueError(
            "Expected a mixture's input state (saved by a checkpoint of a weights= read). "
            f"Received: state={bytes(data)[:80]!r}"
        ) from error
    return state, offset, span


class MixturePosition(ReadPosition):
    """A mixture's :class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition` and stretch.

    Made by the mixture's order for a read that can seek. :meth:`start` gives
    ``(epoch, records, stretch)``: the pass's epoch and records, and the stretch
    ``[offset, start, draws...]`` (the draws by the sources of ``weights``, in order).

    Args:
        batch_size: The examples of a global batch.
        weights: The reader's ``weights=`` (each source's weight, by name).
        sizes: Each source's records.
        span: The global positions of a pass (``num_epochs`` epochs of the mixture).
        workers: The workers of the cluster.
        seed: The seed of the sources' orders.

    Attributes:
        mixture: The :class:`~tfr_hooks.tfrecord.pipelines.mixture.MixtureState` the
            passes read (its last stretch from the position it was sought at).
        offset: Global position minus ``epoch * span + records``.
        span: The global positions of a pass.
    """

    def __init__(
        self,
        batch_size: int,
        *,
        weights: Mapping[str, float],
        sizes: Mapping[str, int],
        span: int,
        workers: int = 1,
        seed: int | None = None,
    ) -> None:
        super().__init__(batch_size, workers=workers, seed=seed)
        self.weights = {name: float(w) for name, w in weights.items()}
        self.sizes = {name: int(sizes[name]) for name in self.weights}
        self.mixture = MixtureState.initial(self.weights, self.sizes)
        self.names = self.mixture.stretches[-1].names
        self.span = int(span)
        self.offset = 0
        width = 2 + len(self.names)
        with tf.init_scope():
            if self._eager:
                self.stretch = tf.Variable(
                    tf.zeros([width], tf.int64), trainable=False, name="mixture_stretch"
                )
            else:
                self.stretch = tf.compat.v1.Variable(
                    tf.zeros([width], tf.int64),
                    trainable=False,
                    name="mixture_stretch",
                    use_resource=True,
                    collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                )
        if not self._eager:
            self._stretch_in = tf.compat.v1.placeholder(tf.int64, [width], name="stretch_in")
            self._assign_stretch = self.stretch.assign(self._stretch_in)

    def _take(self) -> tuple[tf.Tensor, ...]:
        """The epoch, records and stretch now (the pass counted, the records put to 0)."""
        epoch, records = super()._take()
        with tf.control_dependencies([epoch, records]):
            stretch = self.stretch.read_value()
        return epoch, records, stretch

    def initialize_once(self) -> Any:
        """Graph mode: the epoch, records and stretch initialized when they are not yet."""
        width = 2 + len(self.names)
        stretch = tf.cond(
            self.stretch.is_initialized(),
            lambda: tf.constant(0, tf.int64),
            lambda: tf.reduce_sum(self.stretch.assign(tf.zeros([width], tf.int64))),
        )
        return tf.group(super().initialize_once(), stretch)

    def seek(
        self, epoch: int, records: int, session: Any = None, *, state: bytes | None = None
    ) -> None:
        """Start the next pass as epoch ``epoch`` at ``records``, in the stretch ``state`` says.

        Args:
            epoch: The epoch (pass number) the next pass reads.
            records: The records of that epoch's sequence already read.
            session: In graph mode, the session the variables live in.
            state: The :meth:`input_state` a checkpoint saved with that position, or
                ``None`` to keep the stretch this position reads. Saved at other
                weights (or sources), the state is reweighted at the global position
                where that run stopped, and the passes go on from there at this
                reader's weights.

        Raises:
            ValueError: ``state`` is not a mixture's, or a kept source's size changed.
        """
        super().seek(epoch, records, session)
        if state is None:
            return
        saved, saved_offset, saved_span = decode_input_state(state)
        at = epoch * saved_span + records + saved_offset
        now = MixtureState.initial(self.weights, self.sizes).stretches[-1]
        last = saved.stretches[-1]
        same = (last.names, last.weights, last.sizes) == (now.names, now.weights, now.sizes)
        if same and last.start <= at:
            self.mixture = saved
        else:
            self.mixture = saved.reweighted(at, self.weights, self.sizes)
            logger.info(
                "The mixture goes on at global position %d with weights %s (saved with %s): "
                "each source continues from the draws it reached (%s).",
                at,
                dict(zip(now.names, now.weights, strict=True)),
                dict(zip(last.names, last.weights, strict=True)),
                dict(zip(now.names, self.mixture.stretches[-1].draws, strict=True)),
            )
        self.offset = at - (epoch * self.span + records)
        self._put_stretch(session)

    def _put_stretch(self, session: Any) -> None:
        """Put the last stretch (from :attr:`mixture` and :attr:`offset`) in the variable."""
        last = self.mixture.stretches[-1]
        value = np.array([self.offset, last.start, *last.draws], np.int64)
        if self._eager:
            self.stretch.assign(value)
        else:
            session.run(self._assign_stretch, {self._stretch_in: value})

    def input_state(self) -> bytes:
        """What a checkpoint saves beside the loop's position: the state and the offset."""
        return encode_input_state(self.mixture, self.offset, self.span)

    def __repr__(self) -> str:
        return (
            f"MixturePosition(batch_size={self.batch_size}, workers={self.workers}, "
            f"seed={self.seed!r}, weights={self.weights!r})"
        )
