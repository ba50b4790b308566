"""Where a reader's next pass starts: a declared position, read when the pass starts.

A pipeline that can enter its data anywhere (``shuffle="global"``, streamed, on packed
shards, on damaged files or in memory; no shuffle, streamed or in memory) reads its passes through a
:class:`ReadPosition`: two ``int64`` variables, the number of the next pass (its epoch)
and the records of its sequence to start it at. Each new iterator (in graph
mode, each initialization of one) reads both when its pass starts, counts the pass,
and puts the records back to 0, so that later passes start at their beginning.

A resumed run puts the position where the interrupted run was (:meth:`ReadPosition.seek`,
called by the engine: ``(epoch, records done)``) instead of replaying
the passes before it and skipping the batches already trained on: the pass starts
there, reading nothing before it (a global order rereads at most the window it starts
in; an unshuffled stream at most the block of 128 records each file is entered in).
The whole input state is :meth:`ReadPosition.state`: four integers.

**One sequence for any number of workers.** The records are those of one global
sequence, the same on any worker count: the pass a single worker reads. Under
``MultiWorkerMirroredStrategy`` every worker reads that sequence in global batches and
the strategy keeps each worker's part of each one (the data is split by data:
TensorFlow's ``AutoShardPolicy.DATA``; parts of a batch that does not divide by the
workers differ by one example at most). A step is one global batch, so ``(epoch, steps
done x batch size)`` is the same place for 1, 2 or 3 workers: a run saved on N workers
resumes on M exactly. The price: every worker reads (and parses) the whole sequence.

Examples:
    >>> from tfr_hooks import tfrecord
    >>> train = tfrecord.source("data/train", 128, shuffle="global", seed=3)  # doctest: +SKIP
    >>> train.position.seek(epoch=4, records=128 * 900)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

__all__ = ["ReadPosition", "SessionPosition", "at_most"]


class ReadPosition:
    """The pass a pipeline reads next and the records of its sequence to start it at.

    Made by the readers for the pipelines that can enter their data at a position; the
    source holds it as ``position`` (:class:`~tfr_hooks.tfrecord.Source`, ``Batches``),
    not its facts, which are values. In graph mode its variables live in the graph the
    reader was built in (initialized with the others).

    Args:
        batch_size: The examples of a global batch (the reader's batch size).
        workers: The workers of the cluster (each takes its part of every global batch:
            the position does not depend on it; :meth:`state` records it).
        split: The steps one batch makes (1: a step is a global batch).
        seed: The seed of the passes' orders (kept with the position, as a record of
            what it means), or ``None`` when unshuffled.
        grain: The batches a pass can be entered at a multiple of: a bucketed read's
            ``bucket_pool`` (its batches are cut from whole pools, so a pass starts at a
            pool's start and the steps inside the pool are skipped), else 1.
    """

    def __init__(
        self,
        batch_size: int,
        *,
        workers: int = 1,
        split: int = 1,
        seed: int | None = None,
        grain: int = 1,
    ) -> None:
        self.batch_size, self.workers, self.split, self.seed = batch_size, workers, split, seed
        self.grain = grain
        self._eager = tf.executing_eagerly()
        with tf.init_scope():
            self.epoch = _variable("read_epoch", self._eager)
            self.records = _variable("read_records", self._eager)
        if not self._eager:  # the assignments a session runs, made once in the graph
            self._epoch_in = tf.compat.v1.placeholder(tf.int64, [], name="read_epoch_in")
            self._records_in = tf.compat.v1.placeholder(tf.int64, [], name="read_records_in")
            self._assign = tf.group(
                self.epoch.assign(self._epoch_in), self.records.assign(self._records_in)
            )

    def start(self) -> tf.data.Dataset:
        """One element, ``(epoch, records)``, read when an iterator over it starts.

        Reading it counts the pass (the epoch goes up by one) and puts the records back
        to 0. The pipelines ``flat_map`` their pass over it. Eagerly it is read at the
        iterator's first element; in graph mode when the iterator is initialized (the
        initializer runs the tensors a dataset is made of), so that each initialization
        counts a pass, as a replay counts them (a pass started and left), and a session
        that initialized no local variable reads all the same.
        """
        if not self._eager:
            return tf.data.Dataset.from_tensors(self._take())
        return tf.data.Dataset.from_tensors(tf.constant(0, tf.int64)).map(lambda _: self._take())

    def _take(self) -> tuple[tf.Tensor, tf.Tensor]:
        """The epoch and records now, the pass counted and the records put back to 0."""
        ready = [] if self._eager else [self.initialize_once()]
        with tf.control_dependencies(ready):
            records = self.records.read_value()
            epoch = self.epoch.assign_add(1) - 1
        with tf.control_dependencies([records]):
            reset = self.records.assign(0)
        with tf.control_dependencies([reset]):
            return tf.identity(epoch), tf.identity(records)

    def initialize_once(self) -> Any:
        """Graph mode: an op initializing the variables when they are not yet (else nothing).

        The reader runs it with the iterator's initializer, so that a session which
        initializes no local variable reads all the same, and one that seeked keeps its
        position.
        """

        def once(variable: Any) -> Any:
            return tf.cond(
                variable.is_initialized(),
                lambda: tf.constant(0, tf.int64),
                lambda: tf.identity(variable.assign(0)),
            )

        return tf.group(once(self.epoch), once(self.records))

    def seek(
        self, epoch: int, records: int, session: Any = None, *, state: bytes | None = None
    ) -> None:
        """Start the next pass as epoch ``epoch``, at this worker's record ``records``.

        Args:
            epoch: The epoch (pass number) the next pass reads.
            records: The records of that epoch's sequence already read (global: those
                of all workers).
            session: In graph mode, the session the variables live in.
            state: The :meth:`input_state` a checkpoint saved with that position. A
                position whose read keeps no state of its own (all but a mixture's,
                :class:`~tfr_hooks.tfrecord.pipelines.mixture_position.MixturePosition`)
                ignores it.

        Raises:
            ValueError: ``epoch`` or ``records`` is negative, ``records`` is not at a
                pool's start of a bucketed read, or graph mode without a session.
        """
        for name, value in (("epoch", epoch), ("records", records)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"Expected `{name}` to be an integer >= 0. Received: {name}={value!r}"
                )
        pool = self.grain * self.batch_size
        if self.grain > 1 and records % pool:
            raise ValueError(
                f"Expected `records` at a pool's start (a multiple of {pool}: bucket_pool "
                f"{self.grain} x batch size {self.batch_size}); a bucketed read cuts its "
                f"batches from whole pools: seek to {records - records % pool} and skip "
                f"the {(records % pool) // self.batch_size} batches after it. "
                f"Received: records={records}"
            )
        if self._eager:
            self.epoch.assign(epoch)
            self.records.assign(records)
            return
        if session is None:
            raise ValueError(
                "Expected the session of the reader's graph to seek in graph mode. "
                "Received: session=None"
            )
        session.run(self._assign, {self._epoch_in: epoch, self._records_in: records})

    def input_state(self) -> bytes | None:
        """What a checkpoint saves beside the loop's position, or ``None``: nothing.

        A read whose passes depend on more than ``(epoch, records)`` (a mixture's
        stretches of weights) returns its state as bytes.
        """
        return None

    def state(self, session: Any = None) -> dict[str, int]:
        """The whole input state: the seed, the workers, the next pass's epoch and its records.

        The position (``epoch``, ``records``) does not depend on ``workers``: the count
        is a record of the run that saved it.
        """
        if self._eager:
            epoch, records = int(self.epoch.numpy()), int(self.records.numpy())
        else:
            epoch, records = (int(v) for v in session.run([self.epoch, self.records]))
        return {
            "seed": int(self.seed or 0),
            "workers": self.workers,
            "epoch": epoch,
            "records": records,
        }

    def in_session(self, session: Any) -> SessionPosition:
        """This position seeking in graph-mode ``session`` (what a session loop hands on)."""
        return SessionPosition(self, session)

    def __repr__(self) -> str:
        return (
            f"ReadPosition(batch_size={self.batch_size}, workers={self.workers}, "
            f"seed={self.seed!r}, grain={self.grain})"
        )


class SessionPosition:
    """A graph-mode :class:`ReadPosition` bound to a session: ``seek(epoch, records)``.

    Args:
        position: The position (its variables live in the session's graph).
        session: The session, or a function returning it (made when the loop starts).
    """

    def __init__(self, position: ReadPosition, session: Any) -> None:
        self.position = position
        self.batch_size, self.workers = position.batch_size, position.workers
        self.split, self.grain = position.split, position.grain
        self._session = session

    def seek(self, epoch: int, records: int, *, state: bytes | None = None) -> None:
        """:meth:`ReadPosition.seek` in the session."""
        session = self._session() if callable(self._session) else self._session
        self.position.seek(epoch, records, session=session, state=state)

    def input_state(self) -> bytes | None:
        """:meth:`ReadPosition.input_state`."""
        return self.position.input_state()


def at_most(data: tf.data.Dataset, batches: int) -> tf.data.Dataset:
    """``data``, whose ``cardinality()`` says ``batches``, a length declared, not asserted.

    A whole pass of a pipeline with a position makes ``batches``; a pass entered at a
    position makes fewer, which ``assert_cardinality`` would fail ("expected to contain
    ``batches`` elements"). Here the pass ends where its data ends, and Keras ``fit``
    and the loops still know the length of a whole pass up front.

    Built of public stages whose length TensorFlow counts (checked on TF 2.21 by
    ``tests/test_resume_position.py``): ``data``, then a dataset that gives nothing but
    counts as endless (an empty stage repeated: ``repeat`` ends when its input gives
    nothing, and never opens ``data`` again), cut at ``batches`` (``take``).
    """
    nothing = (
        tf.data.Dataset.from_tensors(tf.constant(0, tf.int64))
        .filter(lambda _: False)
        .flat_map(lambda _: data.take(0))
        .repeat()
    )
    return data.concatenate(nothing).take(batches)


def _variable(name: str, eager: bool) -> Any:
    """An ``int64`` counter at 0; in graph mode, a local resource variable.

    Local: initialized with the others, never in a checkpoint (a model's checkpoints
    stay as they were).
    """
    if eager:
        return tf.Variable(0, dtype=tf.int64, trainable=False, name=name)
    return tf.compat.v1.Variable(
        0,
        dtype=tf.int64,
        trainable=False,
        name=name,
        use_resource=True,
        collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
    )
