"""The input contract: what a reader knows about the data it built, as a declared value.

A loop that reads TFRecord batches needs facts that a ``tf.data.Dataset`` does not carry:
the pipeline kind, the files and their schema, the examples of one epoch, the steps it
makes, and the tf.data service it is read through. The readers hand them over as a
:class:`ReadFacts` value, never as attributes set on a ``tf.data`` object (the user's
next ``.map()`` returns a new dataset without them, and the guarantees built on them
would silently go):

- :func:`~tfr_hooks.tfrecord.source` returns a :class:`Source`: the dataset and its
  facts. Its :meth:`Source.map`, :meth:`Source.prefetch` and :meth:`Source.with_options`
  keep the facts (they keep every batch), so augmentation after the reader stays
  watched. :class:`~tfr_hooks.FunctionLoop` takes a :class:`Source` or a plain dataset;
- :func:`~tfr_hooks.tfrecord.read_batches` returns :class:`~tfr_hooks.tfrecord.Batches`,
  whose ``facts`` are the same value, for :class:`~tfr_hooks.SessionLoop`;
- a dataset :func:`~tfr_hooks.tfrecord.dataset` returned, and the same followed by
  transforms that keep every batch (``.map()``, ``.prefetch()``, ``.with_options()``),
  gets its reader's facts (:func:`facts_of_dataset`): the reader notes them for the
  dataset it returns (:func:`note_read`, held while the dataset lives), and the loop
  finds that dataset behind the user's stages
  (:func:`tfr_hooks.tf_private.dataset_stages`), so a resumed run seeks there too
  (:func:`position_of_source`). A
  stage that may drop or add batches (``filter``, ``take``, ``unbatch``, ``rebatch``,
  ``shuffle``, ``cache``...) hides the position: the run replays, and the log says why;
- any other dataset (a user's own pipeline) gets the facts its graph shows: the steps
  of its cardinality, and the address of any tf.data service it reads through, so that
  a run on it is watched all the same.

The facts are values only. Where the next pass starts (a
:class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`, live TensorFlow variables)
is reached from the source: :attr:`Source.position`, ``Batches.position``, or
:func:`position_of_source` for a dataset.

Examples:
    >>> from tfr_hooks import tfrecord
    >>> train = tfrecord.source("data/train", 128,
    ...                         service="grpc://dispatcher:5050")  # doctest: +SKIP
    >>> train = train.map(augment)  # still a Source, its facts kept  # doctest: +SKIP
    >>> FunctionLoop(train, model=model).run(epochs=3)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tfr_hooks.tf_private as tf_private
from tfr_hooks.tfrecord.formats.damage import CorruptRecord
from tfr_hooks.tfrecord.pipelines.options import PipelineKind, ReadOptions
from tfr_hooks.tfrecord.pipelines.position import ReadPosition
from tfr_hooks.tfrecord.schema.decoding import Decoding

if TYPE_CHECKING:
    from tfr_hooks.tfrecord.pipelines.plan import Plan

__all__ = [
    "ReadFacts",
    "Source",
    "epoch_steps",
    "facts_of_dataset",
    "data_and_facts",
    "note_read",
    "position_of_source",
]

logger = logging.getLogger(__name__)

#: the facts and the position of each dataset a reader returned, while it lives (a weak
#: key: the dataset dropped, its entry goes; neither refers back to the dataset)
_READS: weakref.WeakKeyDictionary[Any, tuple[ReadFacts, ReadPosition | None]] = (
    weakref.WeakKeyDictionary()
)


@dataclass(frozen=True)
class ReadFacts:
    """What a reader knows about the input it built; ``None`` where it does not know.

    The readers build it with :meth:`of_read` only; the rules the loops apply to it (the
    steps of an epoch on some workers, the examples of a served epoch, the damaged
    records counted) are its methods, written here once. It holds values only: the
    position a resumed run seeks is the source's (:attr:`Source.position`).

    Attributes:
        kind: The :class:`~tfr_hooks.tfrecord.PipelineKind` built, or ``None`` for a
            dataset the package did not build.
        files: The files read (empty when unknown).
        schema: The :class:`~tfr_hooks.tfrecord.Schema` parsed with, or ``None``.
        compression: ``""``, ``"GZIP"`` or ``"ZLIB"``.
        batch_size: Examples per batch, or ``None``.
        drop_remainder: Whether each pass drops its final, smaller batch.
        num_epochs: Passes over the files in one pass over the data (``None``: endless).
        examples: The examples of one epoch (one pass over the data), when known: every
            file counted in a ``schema.json``, or the data loaded into memory.
        steps: The steps one epoch makes, when known before it runs (a dataset's
            cardinality; under a multi-worker strategy sharding by file, the steps the
            strategy makes, see :func:`~tfr_hooks.tfrecord.pipelines.sharding.file_sharded_steps`).
        steps_workers: The workers ``steps`` was counted for (1: no strategy).
        examples_per_record: Examples stored in a record (more than 1: packed shards).
        service: The tf.data service dispatcher whose workers run the pipeline
            (``"grpc://HOST:PORT"``), or ``None`` when it runs in this process.
        corrupt_records: The damaged records the reader skips
            (:class:`~tfr_hooks.tfrecord.CorruptRecord`), found when it was built with
            ``max_corrupt_records`` above 0; ``None`` when it did not look (0, the
            default: a damaged record raises).
        decoding: How the records become the features of ``schema``, when a source
            declares it (a TFDS directory's
            :class:`~tfr_hooks.tfrecord.sources.tfds.TfdsDecoding`, with the names of
            its class labels); ``None`` when they are parsed as ``schema`` declares.
        mixture: A mixture's order (``weights=``), as the bytes of its
            :class:`~tfr_hooks.tfrecord.pipelines.mixture.MixtureState` (its sources,
            their weights and sizes), from which each source's examples of an epoch
            follow; ``None`` for one source.
    """

    kind: PipelineKind | None = None
    files: tuple[str, ...] = ()
    schema: Any = None
    compression: str = ""
    batch_size: int | None = None
    drop_remainder: bool = False
    num_epochs: int | None = 1
    examples: int | None = None
    steps: int | None = None
    steps_workers: int = 1
    examples_per_record: int = 1
    service: str | None = None
    corrupt_records: tuple[CorruptRecord, ...] | None = None
    decoding: Decoding | None = None
    mixture: bytes | None = None

    @classmethod
    def of_read(
        cls,
        plan: Plan,
        options: ReadOptions,
        kind: PipelineKind,
        examples: int | None,
        steps: int | None,
    ) -> ReadFacts:
        """The facts of a read: what ``plan`` resolved, ``options`` asked and the build gave.

        The one constructor the readers use (:func:`~tfr_hooks.tfrecord.source`,
        :func:`~tfr_hooks.tfrecord.dataset` and :func:`~tfr_hooks.tfrecord.read_batches`).

        Args:
            plan: The files, schema and compression read, and the damage skipped.
            options: The reader's checked options.
            kind: The pipeline built.
            examples: The examples of one pass, when known.
            steps: The steps of one epoch (one iterator, one initialization), when
                known before it runs; ``None`` also when read through a service.
        """
        from tfr_hooks.tfrecord.pipelines.mixture_sources import initial_state

        state = initial_state(plan, options)
        return cls(
            kind=kind,
            files=tuple(plan.files),
            schema=plan.schema,
            compression=plan.compression,
            batch_size=options.batch_size,
            drop_remainder=options.drop_remainder,
            num_epochs=options.num_epochs,
            examples=examples,
            steps=None if options.service is not None else steps,
            examples_per_record=plan.per_record,
            service=options.service,
            corrupt_records=None if plan.damage is None else plan.damage.corrupt,
            decoding=plan.decoding,
            mixture=None if state is None else state.to_bytes(),
        )

    def steps_on(self, num_workers: int) -> int | None:
        """The steps of one epoch on ``num_workers`` workers, when known before it runs."""
        return self.steps if num_workers == self.steps_workers else None

    def served_examples(self) -> int | None:
        """The examples of one epoch read through :attr:`service`, when known.

        One epoch is one iterator (in graph mode, one initialization of it): ``num_epochs``
        passes. ``None`` when the data is not served, or is read by several trainers
        sharing a job (each gets a part of unknown size), or endless.
        """
        if self.service is None or self.num_epochs is None or self.examples is None:
            return None
        return self.examples * self.num_epochs

    @property
    def corrupt_count(self) -> int | None:
        """The damaged records skipped, or ``None`` when the reader did not look."""
        return None if self.corrupt_records is None else len(self.corrupt_records)


@dataclass(frozen=True)
class Source:
    """A ``tf.data.Dataset`` of batches with what its reader knows of it.

    Made by :func:`~tfr_hooks.tfrecord.source`. The loops take it where they take a
    dataset; ``model.fit`` takes :attr:`dataset`. Transform it with its own methods,
    which keep :attr:`facts` (each keeps every batch, so the epoch's examples and steps
    hold); a transformation that drops or adds batches (``filter``, ``take``,
    ``repeat``) belongs on :attr:`dataset`, whose facts are then what its graph shows.

    Attributes:
        dataset: The dataset of batches.
        facts: What the reader knows: a :class:`ReadFacts`.
        position: Where the next pass starts (a
            :class:`~tfr_hooks.tfrecord.pipelines.position.ReadPosition`), when the
            pipeline can start a pass anywhere: a resumed run seeks there instead of
            replaying the passes and batches before it (bucketed from pools, at the
            pool's start). ``None`` when it cannot (``shuffle=N`` streamed or in
            memory, the tf.data service, damaged files without ``shuffle="global"``,
            bucketing in memory, ``num_epochs`` other than 1 but in a mixture).
    """

    dataset: Any
    facts: ReadFacts
    position: ReadPosition | None = None

    def map(self, fn: Callable[..., Any], **kwargs: Any) -> Source:
        """``dataset.map(fn, **kwargs)``, with the same facts (a map keeps every batch)."""
        return dataclasses.replace(self, dataset=self.dataset.map(fn, **kwargs))

    def prefetch(self, buffer_size: int) -> Source:
        """``dataset.prefetch(buffer_size)``, with the same facts."""
        return dataclasses.replace(self, dataset=self.dataset.prefetch(buffer_size))

    def with_options(self, options: Any) -> Source:
        """``dataset.with_options(options)``, with the same facts."""
        return dataclasses.replace(self, dataset=self.dataset.with_options(options))

    @property
    def element_spec(self) -> Any:
        """The dataset's ``element_spec``."""
        return self.dataset.element_spec

    def __iter__(self) -> Any:
        return iter(self.dataset)


def epoch_steps(examples: int | None, options: ReadOptions) -> int | None:
    """The batches of one epoch (``num_epochs`` passes over ``examples``), when known.

    ``None`` when the examples or the passes are unknown, or when the batches depend on
    the order the examples come in (streamed bucketing).
    """
    num_epochs, batch_size = options.num_epochs, options.batch_size
    if examples is None or num_epochs is None:
        return None
    total = examples * num_epochs
    return total // batch_size if options.drop_remainder else -(-total // batch_size)


def note_read(dataset: Any, facts: ReadFacts, position: ReadPosition | None = None) -> None:
    """Note ``facts`` and ``position`` as what the reader knows of the ``dataset`` it returns.

    Held while ``dataset`` lives (a weak reference), for :func:`facts_of_dataset` and
    :func:`position_of_source` to find behind the user's stages: they travel with the
    reader's own dataset object, which each later stage holds as its input, never as an
    attribute of it.
    """
    _READS[dataset] = (facts, position)


def _noted_read(dataset: Any) -> tuple[tuple[ReadFacts, ReadPosition | None] | None, list[str]]:
    """The read noted behind ``dataset``'s stages, if any, and the stages hiding it.

    The stages are those met before the noted dataset that may drop or add batches
    (outermost first).
    """
    hiding: list[str] = []
    for stage, name, keeps in tf_private.dataset_stages(dataset):
        read = _READS.get(stage)
        if read is not None:
            return read, hiding
        if not keeps:
            hiding.append(name)
    return None, hiding


def facts_of_dataset(dataset: Any, *, why: str = "") -> ReadFacts:
    """The facts of a plain ``tf.data.Dataset``: its reader's, or what its graph shows.

    A dataset :func:`~tfr_hooks.tfrecord.dataset` returned (:func:`note_read`), alone or
    behind stages that keep every batch (``map``, ``prefetch``, ``with_options``), has
    its reader's facts. Behind a stage that may drop or add batches (``filter``,
    ``take``...), and for any other dataset, the facts are those of its graph: the steps
    of its cardinality when known (for one worker), and the address of the first tf.data
    service it reads through (:func:`tfr_hooks.tf_private.service_addresses`), whoever
    called ``distribute``.

    Args:
        dataset: The dataset.
        why: What the dataset is for, when a hidden position matters (the training data
            a resumed run would seek): a reader's position hidden by a stage is logged
            at INFO level, naming the stage.
    """
    read, hiding = _noted_read(dataset)
    if read is not None and not hiding:
        return read[0]
    if read is not None and why and read[1] is not None:
        logger.info(
            "The %s reads tfrecord.dataset(...) through stages that may drop or add "
            "batches (%s): a run resumed mid-epoch replays the epoch up to its step "
            "instead of seeking (only map, prefetch and with_options keep the seek)",
            why,
            ", ".join(reversed(hiding)),
        )
    value = dataset.cardinality()
    # graph mode: a tensor a session would compute, unknown here (UNKNOWN_CARDINALITY)
    cardinality = int(value) if hasattr(value, "numpy") else -2
    addresses = tf_private.service_addresses(dataset)
    return ReadFacts(
        num_epochs=None if cardinality == -1 else 1,  # INFINITE_CARDINALITY is -1
        steps=cardinality if cardinality >= 0 else None,
        service=addresses[0] if addresses else None,
    )


def position_of_source(data: Any) -> ReadPosition | None:
    """Where the next pass of ``data`` (a :class:`Source` or a dataset) starts, if it can.

    A :class:`Source`'s :attr:`~Source.position`; for a dataset
    :func:`~tfr_hooks.tfrecord.dataset` returned, alone or behind stages that keep every
    batch, its reader's (:func:`note_read`). ``None`` for any other dataset, or one
    behind a stage that may drop or add batches.
    """
    if isinstance(data, Source):
        return data.position
    read, hiding = _noted_read(data)
    return read[1] if read is not None and not hiding else None


def data_and_facts(data: Any, *, why: str = "") -> tuple[Any, ReadFacts]:
    """The dataset and the facts of what a loop was given: a :class:`Source` or a dataset.

    A :class:`Source` reading through a service that its facts do not name (one that
    the user's own pipeline added) is watched too: the address comes from the graph.
    ``why``: as for :func:`facts_of_dataset`.
    """
    if isinstance(data, Source):
        facts = data.facts
        if facts.service is None:
            addresses = tf_private.service_addresses(data.dataset)
            if addresses:
                facts = dataclasses.replace(facts, service=addresses[0])
        return data.dataset, facts
    return data, facts_of_dataset(data, why=why)
