"""The benchmark's configurations: one function per row, run in a fresh worker process.

Every configuration trains the same model (``mlp`` or ``cnn``) with the same batch size
on the same TFRecord files for one warm-up epoch and ``epochs`` timed epochs, and
returns the examples and seconds of the timed epochs only: the clock starts when the
warm-up epoch has ended (its callbacks included) and stops when the last timed epoch
has ended (its callbacks included). Import, graph building, session creation, tracing
and the warm-up epoch are never timed.

Models, shared by every row (tf_keras in graph mode, Keras 3 in TF2):

* ``mlp``: uint8[784] -> Rescaling(1/255) -> Dense(256, relu) -> Dense(256, relu) ->
  Dense(10) logits.
* ``cnn``: uint8[784] -> Rescaling(1/255) -> Reshape(28, 28, 1) -> Conv2D(16, 3,
  stride 2, relu) -> Conv2D(32, 3, stride 2, relu) -> Flatten -> Dense(64, relu) ->
  Dense(10) logits.

Loss: sparse categorical cross-entropy on logits, metric accuracy, optimizer Adam(1e-3)
(``tf_keras.optimizers.legacy.Adam`` in graph mode, ``keras.optimizers.Adam`` in TF2).
"""

from __future__ import annotations

import logging
import os
import resource
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bench_turns

from tfr_hooks.quiet import import_tensorflow

# Before anything imports TensorFlow: drops its start-up notices ("failed call to
# cuInit"...) in the fork server, which also probes the devices once for every worker.
import_tensorflow()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

import tfr_hooks  # noqa: E402
from tfr_hooks import tfrecord  # noqa: E402

__all__ = ["Spec", "FUNCTIONS", "run_config", "worker_entry", "write_entry", "real_entry"]

v1 = tf.compat.v1
LEARNING_RATE = 1e-3


@dataclass
class Spec:
    """What one worker runs: a configuration, a model, the data and the epochs."""

    config: str
    model: str
    data_dir: str
    batch_size: int = 128
    epochs: int = 1
    workdir: str = "/tmp/tfr_hooks_bench/work"
    seed: int = 0
    repeat: int = 0
    profile: str | None = None
    #: this worker's ``TF_CONFIG`` in a multi-worker row (set before the strategy exists)
    tf_config: str | None = None
    #: ``--suite real``: the sizes of its data sets, ``{"img": n, "txt": n}`` (bench_real)
    real: dict[str, int] | None = None
    #: the timed rounds of an ``_unmeasured`` row, and the timed epochs of a group's rows
    #: (``None``: ``PAIRED_ROUNDS_PER_EPOCH`` a timed epoch)
    paired_rounds: int | None = None
    #: the rows of a group (``bench_configs.GROUPS``) run in this process, their epochs
    #: in turn (bench_turns); ``config`` is then the group's name
    group: list[str] | None = None


def quiet() -> None:
    """Drop the notices every run would print (worker processes only)."""
    tf.get_logger().setLevel(logging.ERROR)  # the queue API's deprecation notices
    warnings.filterwarnings("ignore", message=".*shuffle=True. was passed")
    warnings.filterwarnings("ignore", message="Your input ran out of data")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Clock:
    """Epoch-end marks; the first mark (end of the warm-up epoch) starts the clock."""

    def __init__(self, spec: Spec) -> None:
        self.total = spec.epochs + 1
        self.marks: list[tuple[float, int]] = []
        self.cpu: list[float] = []
        self.profile_path = spec.profile
        self.profiler: Any = None
        #: time spent inside the bracketed hooks/callbacks: per-batch calls, epoch events
        self.in_hooks = {"batch": 0.0, "epoch": 0.0}
        self.hook_marks: list[dict[str, float]] = []
        self._started = 0.0
        #: after each mark: when this row ran again (its turn back, in a group), its CPU
        #: time and hook times then; alone, the mark itself
        self.resumed: list[tuple[float, float, dict[str, float]]] = []

    def mark(self, examples: int) -> None:
        now = time.perf_counter()
        self.marks.append((now, int(examples)))
        self.cpu.append(_cpu_seconds())
        self.hook_marks.append(dict(self.in_hooks))
        pass_on = bench_turns.current()
        if pass_on is not None and len(self.marks) < self.total:
            pass_on()  # a row of a group: the next row's epoch, then this row's again
            self.resumed.append((time.perf_counter(), _cpu_seconds(), dict(self.in_hooks)))
        else:
            self.resumed.append((now, self.cpu[-1], self.hook_marks[-1]))
        if self.profile_path and len(self.marks) == 1:
            from pyinstrument import Profiler

            self.profiler = Profiler(interval=0.001)
            self.profiler.start()
        if self.profiler is not None and len(self.marks) == self.total:
            self.profiler.stop()
            Path(self.profile_path).write_text(self.profiler.output_text(unicode=False))
            self.profiler.last_session.save(self.profile_path + ".pyisession")
            self.profiler = None

    def result(self) -> dict[str, Any]:
        if len(self.marks) < 2:
            raise RuntimeError(f"Expected a warm-up epoch and a timed epoch; got {len(self.marks)}")
        # each timed epoch: from this row's start of it (the previous mark, or its turn
        # back after it in a group) to its end
        spans = [
            (self.marks[i][0] - self.resumed[i - 1][0], self.marks[i][1])
            for i in range(1, len(self.marks))
        ]
        hooks = {
            kind: sum(
                self.hook_marks[i][kind] - self.resumed[i - 1][2][kind]
                for i in range(1, len(self.marks))
            )
            for kind in ("batch", "epoch")
        }
        # each timed epoch's share inside the bracketed callbacks (a group's paired reading)
        inside = [
            sum(self.hook_marks[i][k] - self.resumed[i - 1][2][k] for k in ("batch", "epoch"))
            for i in range(1, len(self.marks))
        ]
        return {
            "seconds": sum(s for s, _ in spans),
            "examples": sum(n for _, n in spans),
            "epochs": len(spans),
            "epoch_rates": [n / s for s, n in spans],
            "epoch_hook_shares": [h / s for h, (s, _) in zip(inside, spans, strict=True)],
            "cpu_seconds": sum(
                self.cpu[i] - self.resumed[i - 1][1] for i in range(1, len(self.marks))
            ),
            "hook_batch_seconds": hooks["batch"],
            "hook_epoch_seconds": hooks["epoch"],
        }

    def enter(self) -> None:
        """The first bracketing hook: the callbacks under test start."""
        self._started = time.perf_counter()

    def leave(self, kind: str) -> None:
        """The last bracketing hook: the callbacks under test are done."""
        self.in_hooks[kind] += time.perf_counter() - self._started


# -- models ---------------------------------------------------------------------------


def _layers(keras_module: Any, model: str, inputs: Any) -> Any:
    layers = keras_module.layers
    h = layers.Rescaling(1.0 / 255)(inputs)
    if model == "mlp":
        h = layers.Dense(256, activation="relu")(h)
        h = layers.Dense(256, activation="relu")(h)
    elif model == "cnn":
        h = layers.Reshape((28, 28, 1))(h)
        h = layers.Conv2D(16, 3, strides=2, activation="relu")(h)
        h = layers.Conv2D(32, 3, strides=2, activation="relu")(h)
        h = layers.Flatten()(h)
        h = layers.Dense(64, activation="relu")(h)
    else:
        raise ValueError(f"Expected model 'mlp' or 'cnn'. Received: {model!r}")
    return layers.Dense(10)(h)


def graph_model(model: str, x: Any) -> Any:
    """The tf_keras model on a graph-mode uint8 batch tensor ``x``."""
    inputs = tf_keras.Input(tensor=x)
    return tf_keras.Model(inputs, _layers(tf_keras, model, inputs))


def graph_training(model: str, x: Any, y: Any) -> tuple[Any, Any, dict[Any, Any]]:
    """The model on ``x`` and its training graph; returns (model, training, feeds).

    ``feeds`` is the learning-phase feed the package's hook adds to every step; the
    hand-written loops feed it too, so every session row runs the same step.
    """
    net = graph_model(model, x)
    training = tfr_hooks.keras_training_graph(
        net,
        y,
        loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        optimizer=tf_keras.optimizers.legacy.Adam(LEARNING_RATE),
        metrics=["accuracy"],
    )
    feeds = {h.learning_phase: True for h in training.hooks}
    return net, training, feeds


def keras3_model(model: str, steps_per_execution: int = 1) -> Any:
    """The compiled Keras 3 model."""
    import keras as k3

    inputs = k3.Input(shape=(784,), dtype="uint8")
    net = k3.Model(inputs, _layers(k3, model, inputs))
    net.compile(
        optimizer=k3.optimizers.Adam(LEARNING_RATE),
        loss=k3.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return net


def callbacks(keras_module: Any, workdir: str) -> list[Any]:
    """ModelCheckpoint + EarlyStopping + TensorBoard, the same settings for both Keras."""
    cbs = keras_module.callbacks
    name = "ckpt.h5" if keras_module is tf_keras else "ckpt.weights.h5"
    return [
        # tf_keras treats "*.weights.h5" as the Keras 3 format, which fails in graph mode
        cbs.ModelCheckpoint(os.path.join(workdir, name), save_weights_only=True),
        cbs.EarlyStopping(monitor="loss", patience=10),
        cbs.TensorBoard(log_dir=os.path.join(workdir, "tb"), profile_batch=0),
    ]


def clock_callback(keras_module: Any, clock: Clock, examples: int) -> Any:
    """A Keras callback (last in the list) that marks the clock at each epoch end."""

    class ClockCallback(keras_module.callbacks.Callback):  # type: ignore[misc,name-defined]
        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            clock.mark(examples)

    return ClockCallback()


def bracket_callbacks(keras_module: Any, clock: Clock, cbs: list[Any]) -> list[Any]:
    """``cbs`` between two callbacks that time every call into them (batch and epoch)."""
    base = keras_module.callbacks.Callback

    class First(base):  # type: ignore[misc,valid-type]
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            clock.enter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            clock.enter()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            clock.enter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            clock.enter()

    class Last(base):  # type: ignore[misc,valid-type]
        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            clock.leave("batch")

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            clock.leave("batch")

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            clock.leave("epoch")

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            clock.leave("epoch")

    return [First(), *cbs, Last()]


def bracket_hooks(clock: Clock, hooks: list[Any]) -> list[Any]:
    """``hooks`` between two hooks that time every call into them (step and epoch).

    Both work per call (``needs_every_step = False``), so they leave
    ``steps_per_execution="auto"`` free to run many steps a call.
    """

    class First(tfr_hooks.Hook):  # type: ignore[misc,name-defined]
        needs_every_step = False  # times each call: "auto" may run many steps in one

        def before_run(self, run_context: Any) -> None:
            clock.enter()

        def after_run(self, run_context: Any, run_values: Any) -> None:
            clock.enter()

        def epoch_begin(self, epoch: int) -> None:
            clock.enter()

        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            clock.enter()

    class Last(tfr_hooks.Hook):  # type: ignore[misc,name-defined]
        needs_every_step = False

        def before_run(self, run_context: Any) -> None:
            clock.leave("batch")

        def after_run(self, run_context: Any, run_values: Any) -> None:
            clock.leave("batch")

        def epoch_begin(self, epoch: int) -> None:
            clock.leave("epoch")

        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            clock.leave("epoch")

    return [First(), *hooks, Last()]


def reported_share(history: dict[str, list[float]], result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with the loop's own reported input wait share of the timed epochs.

    The mean of ``history["input/wait_share"]`` over the epochs after the warm-up (the
    loop measures them; see ``tfr_hooks.input_report``); nothing when not measured.
    """
    from tfr_hooks.input_report import WAIT_SHARE

    shares = history.get(WAIT_SHARE, [])[1:]
    if shares:
        result["input_wait_share"] = float(np.mean(shares))
    return result


def ran_at(
    history: dict[str, list[float]], result: dict[str, Any], asked: int | str
) -> dict[str, Any]:
    """``result`` with the value ``steps_per_execution="auto"`` ran at, when ``asked``.

    The last epoch's ``input/steps_per_execution`` of the loop's history (the value of
    its last call), as ``auto_steps_per_execution``; nothing for a fixed value.
    """
    values = history.get("input/steps_per_execution", [])
    if asked == "auto" and values:
        result["auto_steps_per_execution"] = float(values[-1])
    return result


def clock_hook(clock: Clock) -> Any:
    """A ``tfr_hooks.Hook`` (last in the list) that marks the clock at each epoch end."""

    class ClockHook(tfr_hooks.Hook):  # type: ignore[misc,name-defined]
        def epoch_end(self, epoch: int, logs: dict[str, float]) -> None:
            clock.mark(self.loop.epoch_examples)

    return ClockHook()


# -- data -----------------------------------------------------------------------------


def records(spec: Spec, source: str = "records") -> str:
    """The shards of ``source``: ``"records"`` (one example a record) or ``"packed"``."""
    return os.path.join(spec.data_dir, "packed" if source == "packed" else "records")


#: Shuffle window of the packed rows, in examples (32 blocks of 128).
PACKED_WINDOW = 4096
#: What the in-memory rows note for the RSS check (MiB): the decoded size
#: (``decoded_mb``) and the whole RSS just before the load (``rss_baseline_mb``, kept for
#: the record; the check reads every row's ``anon_baseline_mb`` and ``anon_peak_mb``).
MEMORY_USE: dict[str, float] = {}
#: Seconds between two samples of the worker's anonymous RSS.
RSS_SAMPLE_SECONDS = 0.05


def _rss_now_mb() -> float:
    """This process's resident set size now, in MiB (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as handle:
        pages = int(handle.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _anon_rss_mb() -> float:
    """This process's anonymous resident memory now (``RssAnon``), in MiB (Linux).

    The memory the process itself allocated (numpy arrays, tensors, buffers, stacks),
    without the file-backed pages of its libraries: a worker forked from the fork server
    maps TensorFlow's libraries without having touched their pages, and faults in the
    pages it runs (a hundred MB and more) whether or not it holds any data. Those pages
    made the whole RSS before the load a baseline of the fork server's, not the worker's.
    """
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("Expected an RssAnon line in /proc/self/status (Linux 4.5+)")


class AnonPeak:
    """A worker's anonymous RSS: its baseline now and its peak from now on.

    Started when the worker starts its row (after its imports, which the fork server
    did); a daemon thread samples every :data:`RSS_SAMPLE_SECONDS` until :meth:`stop`.
    """

    def __init__(self) -> None:
        import threading

        self.baseline = self.peak = _anon_rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(RSS_SAMPLE_SECONDS):
            self.peak = max(self.peak, _anon_rss_mb())

    def stop(self) -> dict[str, float]:
        """Stop sampling; the baseline and the peak (with a last sample taken now), MiB."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        return {
            "anon_baseline_mb": self.baseline,
            "anon_peak_mb": max(self.peak, _anon_rss_mb()),
        }


def _before_loading(spec: Spec, decoded_mb: float | None = None) -> None:
    """Note the decoded size the in-memory pipeline will hold (and the RSS before it)."""
    MEMORY_USE["rss_baseline_mb"] = _rss_now_mb()
    if decoded_mb is None:
        decoded_mb = num_examples(spec) * (784 + 8) / 2**20
    MEMORY_USE["decoded_mb"] = decoded_mb


def num_examples(spec: Spec) -> int:
    import json

    return int(json.loads(Path(spec.data_dir, "info.json").read_text())["examples"])


def steps_per_epoch(spec: Spec) -> int:
    """Full batches per epoch: every row runs this many steps of ``batch_size`` an epoch."""
    return num_examples(spec) // spec.batch_size


def read_batches(spec: Spec, pipeline: str, *, reinit: bool = False) -> Any:
    """The package's graph-mode pipeline; endless enough unless ``reinit`` (one pass).

    ``pipeline`` is ``"queue"``, ``"dataset"``, ``"memory"`` (full passes of whole
    batches, a new permutation each) or ``"packed"`` (the tf.data pipeline over the
    packed shards, shuffled in windows of :data:`PACKED_WINDOW` examples).
    """
    # the queue is endless with None; the dataset reads num_epochs passes per
    # initialization: one initialization for the whole run unless reinit (one pass)
    num_epochs: int | None = spec.epochs + 2
    if pipeline == "queue":
        num_epochs = None
    elif reinit:
        num_epochs = 1
    # shuffled in a buffer of 4 batches, 2 files read at once (the figures in
    # bench/results were measured so)
    extra: dict[str, Any] = {
        "shuffle": 4 * spec.batch_size,
        "read_config": tfrecord.ReadConfig(num_parallel_reads=2),
    }
    if pipeline == "memory":
        _before_loading(spec)
        extra["in_memory"] = True
        extra["shuffle"] = "global"  # a fresh permutation of all the examples each pass
        extra["drop_remainder"] = True  # every pass: steps_per_epoch batches
    if pipeline == "packed":
        extra["shuffle"] = PACKED_WINDOW
    return tfrecord.read_batches(
        records(spec, pipeline),
        spec.batch_size,
        pipeline="queue" if pipeline == "queue" else "dataset",
        num_epochs=num_epochs,
        seed=spec.seed,
        as_tuple=("image", "label"),
        **extra,
    )


def tf2_dataset(spec: Spec, *, reinit: bool = False, source: str = "records") -> Any:
    """The package's TF2 pipeline: endless (epochs in steps) unless ``reinit`` (one pass).

    ``source`` is ``"records"`` (tf.data, shuffle buffer 4 batches), ``"memory"``
    (``in_memory=True``: a new permutation of all examples each pass, whole batches) or
    ``"packed"`` (the packed shards, windows of :data:`PACKED_WINDOW` examples).
    """
    extra: dict[str, Any] = {"shuffle": 4 * spec.batch_size}
    if source == "memory":
        _before_loading(spec)
        extra = {"in_memory": True, "shuffle": "global", "drop_remainder": True}
    elif source == "packed":
        extra["shuffle"] = PACKED_WINDOW
    return tfrecord.dataset(
        records(spec, source),
        spec.batch_size,
        seed=spec.seed,
        num_epochs=1 if reinit else None,
        as_tuple=("image", "label"),
        **extra,
    )


def python_batches(spec: Spec) -> Any:
    """Batches parsed in Python, record by record, as a script without a tensor pipeline."""
    from tensorflow.core.example import example_pb2

    images: list[np.ndarray] = []
    labels: list[int] = []
    for path in tfrecord.resolve_files(records(spec)):
        for record in tf.compat.v1.io.tf_record_iterator(path):
            example = example_pb2.Example.FromString(record)
            feature = example.features.feature
            images.append(np.frombuffer(feature["image"].bytes_list.value[0], np.uint8))
            labels.append(feature["label"].int64_list.value[0])
            if len(labels) == spec.batch_size:
                yield np.stack(images), np.asarray(labels, np.int64)
                images, labels = [], []


# -- graph-mode rows --------------------------------------------------------------------


def _session_init(session: Any) -> None:
    session.run([v1.global_variables_initializer(), v1.local_variables_initializer()])


def feed_dict_rows(spec: Spec, source: str) -> dict[str, Any]:
    from bench_data import load_arrays

    clock = Clock(spec)
    steps = steps_per_epoch(spec)
    with tf.Graph().as_default():
        v1.set_random_seed(spec.seed)
        x = v1.placeholder(tf.uint8, [None, 784], name="x")
        y = v1.placeholder(tf.int64, [None], name="y")
        _, training, feeds = graph_training(spec.model, x, y)
        fetch = [training.train_op, training.fetches["loss"]]
        with v1.Session() as session:
            _session_init(session)
            if source == "memory":
                images, labels = load_arrays(spec.data_dir)
                rng = np.random.default_rng(spec.seed)
            for _ in range(spec.epochs + 1):
                seen = 0
                if source == "memory":
                    order = rng.permutation(len(labels))
                    batches: Any = (
                        (images[idx], labels[idx])
                        for idx in (
                            order[i : i + spec.batch_size]
                            for i in range(0, steps * spec.batch_size, spec.batch_size)
                        )
                    )
                else:
                    batches = python_batches(spec)
                for xb, yb in batches:
                    session.run(fetch, {x: xb, y: yb, **feeds})
                    seen += len(yb)
                clock.mark(seen)
    return clock.result()


def tf_keras_fit(spec: Spec) -> dict[str, Any]:
    clock = Clock(spec)
    steps = steps_per_epoch(spec)
    with tf.Graph().as_default():
        v1.set_random_seed(spec.seed)
        batches = read_batches(spec, "dataset")
        x, y = batches.tensors
        net = graph_model(spec.model, x)
        net.compile(
            optimizer=tf_keras.optimizers.legacy.Adam(LEARNING_RATE),
            loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            target_tensors=[y],
        )
        session = tf_keras.src.backend.get_session()
        session.run(batches.initializers)
        net.fit(
            epochs=spec.epochs + 1,
            steps_per_epoch=steps,
            verbose=0,
            callbacks=[clock_callback(tf_keras, clock, steps * spec.batch_size)],
        )
    return clock.result()


def bare_loop(spec: Spec, pipeline: str) -> dict[str, Any]:
    """A hand-written ``while``/``session.run`` loop, ``steps`` steps an epoch."""
    clock = Clock(spec)
    steps = steps_per_epoch(spec)
    with tf.Graph().as_default():
        v1.set_random_seed(spec.seed)
        batches = read_batches(spec, pipeline)
        x, y = batches.tensors
        _, training, feeds = graph_training(spec.model, x, y)
        # the metrics SessionLoop reports (loss, accuracy), as a loop that reports them
        fetch = [training.train_op, training.batch_size, *training.fetches.values()]
        with v1.Session() as session:
            _session_init(session)
            session.run(batches.initializers)
            coord = v1.train.Coordinator()
            threads = v1.train.start_queue_runners(session, coord) if pipeline == "queue" else []
            try:
                for _ in range(spec.epochs + 1):
                    seen = 0
                    for _ in range(steps):
                        seen += session.run(fetch, feeds)[1]
                    clock.mark(seen)
            finally:
                coord.request_stop()
                coord.join(threads, stop_grace_period_secs=10)
    return clock.result()


def session_loop(
    spec: Spec,
    pipeline: str,
    with_callbacks: bool,
    *,
    reinit: bool = False,
    measure_input: bool = True,
) -> dict[str, Any]:
    """``SessionLoop``: ``steps_per_epoch`` steps an epoch, or one pass if ``reinit``."""
    clock = Clock(spec)
    with tf.Graph().as_default():
        v1.set_random_seed(spec.seed)
        batches = read_batches(spec, pipeline, reinit=reinit)
        x, y = batches.tensors
        net, training, _ = graph_training(spec.model, x, y)
        hooks = []
        if with_callbacks:
            hook = tfr_hooks.KerasCallbacks(callbacks(tf_keras, spec.workdir), net)
            hooks = bracket_hooks(clock, [hook])
        hooks.append(clock_hook(clock))
        loop = tfr_hooks.SessionLoop(
            training,
            hooks=hooks,
            steps_per_epoch=None if reinit else steps_per_epoch(spec),
            data=batches,
            measure_input=measure_input,
        )
        history = loop.run(epochs=spec.epochs + 1)
    return reported_share(history, clock.result())


def input_only(spec: Spec, pipeline: str) -> dict[str, Any]:
    """Ceiling: the graph-mode pipeline alone, one ``session.run`` of a tiny fetch a batch."""
    clock = Clock(spec)
    steps = steps_per_epoch(spec)
    with tf.Graph().as_default():
        batches = read_batches(spec, pipeline)
        x, y = batches.tensors
        # depends on every decoded pixel and label, so the whole batch is parsed
        probe = [tf.reduce_sum(tf.cast(x, tf.int32)) + tf.cast(tf.reduce_sum(y), tf.int32)]
        probe.append(tf.shape(y)[0])
        with v1.Session() as session:
            _session_init(session)
            session.run(batches.initializers)
            coord = v1.train.Coordinator()
            threads = v1.train.start_queue_runners(session, coord) if pipeline == "queue" else []
            try:
                for _ in range(spec.epochs + 1):
                    seen = 0
                    for _ in range(steps):
                        seen += session.run(probe)[1]
                    clock.mark(seen)
            finally:
                coord.request_stop()
                coord.join(threads, stop_grace_period_secs=10)
    return clock.result()


def model_only(spec: Spec) -> dict[str, Any]:
    """Ceiling: the same graph-mode training steps on one batch held in the graph."""
    from bench_data import load_arrays

    clock = Clock(spec)
    images, labels = load_arrays(spec.data_dir)
    steps = steps_per_epoch(spec)
    with tf.Graph().as_default():
        v1.set_random_seed(spec.seed)
        x = tf.constant(images[: spec.batch_size])
        y = tf.constant(labels[: spec.batch_size])
        _, training, feeds = graph_training(spec.model, x, y)
        fetch = [training.train_op, training.fetches["loss"]]
        with v1.Session() as session:
            _session_init(session)
            for _ in range(spec.epochs + 1):
                for _ in range(steps):
                    session.run(fetch, feeds)
                clock.mark(steps * spec.batch_size)
    return clock.result()


# -- TF2 rows ---------------------------------------------------------------------------


def keras3_fit(spec: Spec, with_callbacks: bool, steps_per_execution: int = 1) -> dict[str, Any]:
    """Keras 3 ``model.fit`` on the endless pipeline, ``steps_per_epoch`` steps an epoch."""
    import keras as k3

    clock = Clock(spec)
    steps = steps_per_epoch(spec)
    net = keras3_model(spec.model, steps_per_execution)
    cbs = bracket_callbacks(k3, clock, callbacks(k3, spec.workdir)) if with_callbacks else []
    cbs.append(clock_callback(k3, clock, steps * spec.batch_size))
    net.fit(
        tf2_dataset(spec),
        epochs=spec.epochs + 1,
        steps_per_epoch=steps,
        verbose=0,
        callbacks=cbs,
        shuffle=False,
    )
    return clock.result()


def keras3_fit_arrays(spec: Spec) -> dict[str, Any]:
    """Keras 3 ``model.fit`` on the numpy arrays (shuffled by index), spe=32, 3 callbacks."""
    import keras as k3
    from bench_data import load_arrays

    clock = Clock(spec)
    images, labels = load_arrays(spec.data_dir)
    steps = steps_per_epoch(spec)
    net = keras3_model(spec.model, 32)
    cbs = bracket_callbacks(k3, clock, callbacks(k3, spec.workdir))
    cbs.append(clock_callback(k3, clock, steps * spec.batch_size))
    net.fit(
        images,
        labels,
        batch_size=spec.batch_size,
        epochs=spec.epochs + 1,
        steps_per_epoch=steps,
        verbose=0,
        callbacks=cbs,
        shuffle=True,
    )
    return clock.result()


def function_loop(
    spec: Spec,
    steps_per_execution: int | str,
    with_callbacks: bool,
    *,
    reinit: bool = False,
    cached: bool = False,
    source: str = "records",
    strategy: Any = None,
    measure_input: bool = True,
) -> dict[str, Any]:
    """``FunctionLoop``: ``steps_per_epoch`` steps an epoch, or one pass if ``reinit``.

    With ``cached``, the parsed batches of the first pass (the warm-up epoch) are kept in
    memory (``.cache().repeat()``), as ``feed_dict`` from in-memory arrays keeps decoded
    arrays: later epochs neither read nor parse.
    """
    import keras as k3

    from tfr_hooks.tf2.function_loop import FunctionLoop

    clock = Clock(spec)
    if strategy is None:
        net = keras3_model(spec.model)
    else:
        with strategy.scope():
            net = keras3_model(spec.model)
    hooks = []
    if with_callbacks:
        hooks = bracket_hooks(clock, [tfr_hooks.KerasCallbacks(callbacks(k3, spec.workdir), net)])
    hooks.append(clock_hook(clock))
    data = tf2_dataset(spec, reinit=reinit or cached, source=source)
    if cached:
        data = data.cache().repeat()
    loop = FunctionLoop(
        data,
        model=net,
        hooks=hooks,
        steps_per_execution=steps_per_execution,
        steps_per_epoch=None if reinit else steps_per_epoch(spec),
        strategy=strategy,
        measure_input=measure_input,
    )
    history = loop.run(epochs=spec.epochs + 1)
    return ran_at(history, reported_share(history, clock.result()), steps_per_execution)


#: Timed rounds of the paired rows per timed epoch of the spec (each round: one epoch of
#: each loop, in turn).
PAIRED_ROUNDS_PER_EPOCH = 3


class _StepSpan(tfr_hooks.Hook):  # type: ignore[misc,name-defined]
    """The span of a run's steps after its first call: its start, end and examples.

    ``start`` is noted as the second call starts (the first call, tracing and the data's
    restart, is then over and its examples counted), ``last`` as each call ends.
    """

    needs_every_step = False  # counts calls, not steps

    def begin(self) -> None:
        self.calls = 0
        self.start: tuple[float, int] | None = None
        self.last = 0.0

    def before_run(self, run_context: Any) -> None:
        self.calls += 1
        if self.calls == 2:
            self.start = (time.perf_counter(), self.loop.epoch_examples)

    def after_run(self, run_context: Any, run_values: Any) -> None:
        self.last = time.perf_counter()


def _paired_rounds(
    spec: Spec, run_epoch: dict[bool, Callable[[], tuple[float, int, float]]]
) -> dict[str, Any]:
    """Run the two loops' epochs in turn, every other round in reverse; time each.

    ``run_epoch[measured]()`` runs one epoch of that loop (a ``run(epochs=1)``) and
    returns the seconds and examples of its steps and the seconds of its end (epoch end
    and run end). Round 0 is a warm-up. Returns the unmeasured loop's result (its
    seconds, examples and CPU time over the timed rounds), with the measured loop's
    examples a second and CPU time an example in the same process, the rounds' ratios
    (measured / unmeasured) and each loop's median seconds of an epoch's end.
    """
    totals = {m: [0.0, 0, 0.0] for m in (True, False)}  # seconds, examples, CPU seconds
    ends: dict[bool, list[float]] = {True: [], False: []}
    ratios = []
    rounds = spec.paired_rounds or PAIRED_ROUNDS_PER_EPOCH * spec.epochs
    for i in range(rounds + 1):
        rates = {}
        for measured in (True, False) if i % 2 == 0 else (False, True):
            cpu = _cpu_seconds()
            seconds, examples, end = run_epoch[measured]()
            if i:  # round 0: tracing and warm-up
                total = totals[measured]
                total[0] += seconds
                total[1] += examples
                total[2] += _cpu_seconds() - cpu
                rates[measured] = examples / seconds
                ends[measured].append(end)
        if i:
            ratios.append(rates[True] / rates[False])
    on, off = totals[True], totals[False]
    return {
        "seconds": off[0],
        "examples": off[1],
        "epochs": len(ratios),
        "cpu_seconds": off[2],
        "paired_measured_examples_per_sec": on[1] / on[0],
        "paired_measured_cpu_us": 1e6 * on[2] / on[1],
        "paired_round_ratios": ratios,
        "paired_end_seconds": [float(np.median(ends[True])), float(np.median(ends[False]))],
    }


def paired_cost(spec: Spec, loop_kind: str) -> dict[str, Any]:
    """The measurement's cost, in one process: the same loop with and without it.

    Two loops over one model (for ``SessionLoop``, one train op in one session), the
    in-memory pipeline and the 3 callbacks each (in their own directories), one with
    ``measure_input=True`` and one with ``False``; their epochs (each a
    ``run(epochs=1)``) run in turn, every other round in reverse order. An epoch's steps
    are timed from the end of its run's first call (tracing, the data's restart) to the
    end of its last step (an epoch of a single call: from the run's start); the epoch's
    and run's end (the checkpoint, the TensorBoard and input scalars, the hooks' ``end``)
    is timed on its own: a run of one epoch has it every epoch, a longer run once.
    Across worker processes the same rows differ by a few percent from run to run on
    this machine, more than the 1% to be told apart. The loop built first runs about 1%
    slower than its twin even when both measure (an A/A run: median of 30 rounds 0.987
    built first, 0.998 built second), so the repeat's parity decides which is built
    first.
    """
    import keras as k3

    from tfr_hooks.tf2.function_loop import FunctionLoop

    def epoch_of(loop: Any, span: _StepSpan, **run_args: Any) -> Callable[[], Any]:
        def run() -> tuple[float, int, float]:
            began = time.perf_counter()
            loop.run(epochs=1, **run_args)
            end = time.perf_counter()
            # an epoch of one call (--quick's tiny data): its steps from the run's start
            start, seen = span.start if span.start is not None else (began, 0)
            return span.last - start, loop.loop.epoch_examples - seen, end - span.last

        return run

    # the loop built first runs about 1% slower than its twin even when both measure (an
    # A/A run): which one is built first alternates with the repeat, and the rounds of
    # an even number of repeats cancel it
    built = (True, False) if spec.repeat % 2 == 0 else (False, True)
    marks = {m: _StepSpan() for m in built}
    dirs = {m: os.path.join(spec.workdir, "measured" if m else "unmeasured") for m in marks}
    steps = steps_per_epoch(spec)
    if loop_kind == "session":
        with tf.Graph().as_default():
            v1.set_random_seed(spec.seed)
            batches = read_batches(spec, "memory")
            x, y = batches.tensors
            net, training, _ = graph_training(spec.model, x, y)
            loops = {
                m: tfr_hooks.SessionLoop(
                    training,
                    hooks=[tfr_hooks.KerasCallbacks(callbacks(tf_keras, dirs[m]), net), marks[m]],
                    steps_per_epoch=steps,
                    data=batches,
                    measure_input=m,
                )
                for m in marks
            }
            with v1.Session() as session:
                return _paired_rounds(
                    spec, {m: epoch_of(loops[m], marks[m], session=session) for m in marks}
                )
    net = keras3_model(spec.model)
    data = tf2_dataset(spec, source="memory")
    floops = {
        m: FunctionLoop(
            data,
            model=net,
            hooks=[tfr_hooks.KerasCallbacks(callbacks(k3, dirs[m]), net), marks[m]],
            steps_per_execution=32,
            steps_per_epoch=steps,
            measure_input=m,
        )
        for m in marks
    }
    return _paired_rounds(spec, {m: epoch_of(floops[m], marks[m]) for m in marks})


def multi_worker(spec: Spec) -> dict[str, Any]:
    """``function_loop_32_cb`` under ``MultiWorkerMirroredStrategy``, on this worker.

    The same global batch, steps, data and 3 callbacks; each of the N workers (processes
    on this machine, ``TF_CONFIG`` on loopback ports) reads its share of the shards and
    computes half of each global batch, and the gradients are all-reduced every step.
    Logs and example counts are global, so the chief's clock is the cluster's.
    """
    import json

    if spec.tf_config is None:
        raise ValueError("Expected a TF_CONFIG for a multi-worker row. Received: None")
    os.environ["TF_CONFIG"] = spec.tf_config
    workers = len(json.loads(spec.tf_config)["cluster"]["worker"])
    # collectives can hang with fewer inter-op threads than workers + 1
    tf.config.threading.set_inter_op_parallelism_threads(workers + 1)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    result = function_loop(spec, 32, True, strategy=strategy)
    return {**result, "workers": workers}


def input_only_tf2(spec: Spec, source: str = "records") -> dict[str, Any]:
    """Ceiling: the TF2 pipeline alone, consumed inside a ``tf.function`` (no Python a batch)."""
    clock = Clock(spec)
    steps = steps_per_epoch(spec)
    iterator = iter(tf2_dataset(spec, source=source))

    def consume(n: Any) -> Any:
        def body(i: Any, seen: Any) -> Any:
            x, y = next(iterator)
            touch = tf.cast(tf.reduce_sum(tf.cast(x, tf.int32)) * 0, tf.int64)
            return i + 1, seen + tf.shape(y, out_type=tf.int64)[0] + touch + tf.reduce_sum(y) * 0

        return tf.while_loop(lambda i, _: i < n, body, [tf.constant(0), tf.constant(0, tf.int64)])

    run = tf.function(consume, autograph=False)
    for _ in range(spec.epochs + 1):
        clock.mark(int(run(tf.constant(steps))[1]))
    return clock.result()


def steps_on(net: Any, next_batch: Callable[[], Any]) -> Callable[[Any], Any]:
    """``many(n)``: ``n`` of ``net``'s ``train_step`` in a ``tf.while_loop``.

    Each step trains on ``next_batch()``: the model-alone ceiling's loop, and the loops
    compared with it (bench/loop_gap.py).
    """

    def many(n: Any) -> Any:
        def body(i: Any) -> Any:
            logs = net.train_step(next_batch())
            with tf.control_dependencies(tf.nest.flatten(logs)):
                return i + 1

        return tf.while_loop(lambda i: i < n, body, [tf.constant(0)])

    return many


def model_only_tf2(spec: Spec, steps_per_call: int = 32) -> dict[str, Any]:
    """Ceiling: Keras 3 ``train_step`` on one in-memory batch, 32 steps per call."""
    from bench_data import load_arrays

    clock = Clock(spec)
    images, labels = load_arrays(spec.data_dir)
    steps = steps_per_epoch(spec)
    net = keras3_model(spec.model)
    batch = (tf.constant(images[: spec.batch_size]), tf.constant(labels[: spec.batch_size]))
    run = tf.function(steps_on(net, lambda: batch), autograph=False)
    for _ in range(spec.epochs + 1):
        done = 0
        while done < steps:
            n = min(steps_per_call, steps - done)
            run(tf.constant(n))
            done += n
        clock.mark(steps * spec.batch_size)
    return clock.result()


# -- the table ----------------------------------------------------------------------------

#: Configuration name -> function of the spec (descriptions in bench_configs.ROWS).
FUNCTIONS: dict[str, Callable[[Spec], dict[str, Any]]] = {
    "feed_dict_parse": lambda s: feed_dict_rows(s, "parse"),
    "feed_dict_memory": lambda s: feed_dict_rows(s, "memory"),
    "tf_keras_fit": tf_keras_fit,
    "keras3_fit": lambda s: keras3_fit(s, False),
    "keras3_fit_cb": lambda s: keras3_fit(s, True),
    "keras3_fit_spe32": lambda s: keras3_fit(s, False, 32),
    "keras3_fit_spe32_cb": lambda s: keras3_fit(s, True, 32),
    "keras3_fit_arrays": keras3_fit_arrays,
    "bare_queue": lambda s: bare_loop(s, "queue"),
    "bare_dataset": lambda s: bare_loop(s, "dataset"),
    "session_loop_queue": lambda s: session_loop(s, "queue", False),
    "session_loop_queue_cb": lambda s: session_loop(s, "queue", True),
    "session_loop_dataset": lambda s: session_loop(s, "dataset", False),
    "session_loop_dataset_cb": lambda s: session_loop(s, "dataset", True),
    "function_loop_1": lambda s: function_loop(s, 1, False),
    "function_loop_1_cb": lambda s: function_loop(s, 1, True),
    "function_loop_32": lambda s: function_loop(s, 32, False),
    "function_loop_32_cb": lambda s: function_loop(s, 32, True),
    "function_loop_8": lambda s: function_loop(s, 8, False),
    "function_loop_128": lambda s: function_loop(s, 128, False),
    "function_loop_auto": lambda s: function_loop(s, "auto", False),
    "function_loop_auto_cb": lambda s: function_loop(s, "auto", True),
    "session_loop_dataset_reinit": lambda s: session_loop(s, "dataset", False, reinit=True),
    "function_loop_32_reinit": lambda s: function_loop(s, 32, False, reinit=True),
    "function_loop_32_cached": lambda s: function_loop(s, 32, False, cached=True),
    "session_loop_memory": lambda s: session_loop(s, "memory", False),
    "session_loop_memory_cb": lambda s: session_loop(s, "memory", True),
    "session_loop_packed": lambda s: session_loop(s, "packed", False),
    "session_loop_packed_cb": lambda s: session_loop(s, "packed", True),
    "function_loop_32_memory": lambda s: function_loop(s, 32, False, source="memory"),
    "function_loop_32_memory_cb": lambda s: function_loop(s, 32, True, source="memory"),
    "function_loop_32_packed": lambda s: function_loop(s, 32, False, source="packed"),
    "function_loop_32_packed_cb": lambda s: function_loop(s, 32, True, source="packed"),
    "session_loop_memory_cb_unmeasured": lambda s: paired_cost(s, "session"),
    "function_loop_32_memory_cb_unmeasured": lambda s: paired_cost(s, "function"),
    "input_queue": lambda s: input_only(s, "queue"),
    "input_dataset": lambda s: input_only(s, "dataset"),
    "input_tf2": input_only_tf2,
    "input_memory": lambda s: input_only(s, "memory"),
    "input_memory_tf2": lambda s: input_only_tf2(s, "memory"),
    "input_packed": lambda s: input_only(s, "packed"),
    "input_packed_tf2": lambda s: input_only_tf2(s, "packed"),
    "model_only": model_only,
    "model_only_tf2": model_only_tf2,
    "multi_worker_1": multi_worker,
    "multi_worker_2": multi_worker,
}


def run_group(spec: Spec) -> dict[str, Any]:
    """Run the rows of ``spec.group`` in this process, their epochs in turn.

    Each row runs ``spec.paired_rounds`` timed epochs (``PAIRED_ROUNDS_PER_EPOCH`` a
    timed epoch of the spec by default), as an ``_unmeasured`` pair's rounds. Every
    other repeat the rows go in reverse order. Each row gets a directory of its own;
    its result has its own seconds, examples and CPU time (its epochs only) and its
    epochs' examples a second (``epoch_rates``), from which a target between two rows of
    the group reads the median of the rounds' ratios. Their peak RSS is the process's.
    """
    import dataclasses

    import bench_real  # the rows of --suite real (imports this module)
    from bench_turns import run_group as take_turns

    functions = {**FUNCTIONS, **bench_real.FUNCTIONS}
    names = list(spec.group or [])
    order = names if spec.repeat % 2 == 0 else names[::-1]
    # as many timed epochs (rounds) as an _unmeasured pair: 6 rounds a target crossed
    rounds = spec.paired_rounds or PAIRED_ROUNDS_PER_EPOCH * spec.epochs

    def run_one(name: str) -> dict[str, Any]:
        row = dataclasses.replace(
            spec,
            config=name,
            group=None,
            epochs=rounds,
            workdir=os.path.join(spec.workdir, name),
        )
        result = functions[name](row)
        result["examples_per_sec"] = result["examples"] / result["seconds"]
        return result

    rows = take_turns(order, run_one)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    for result in rows.values():
        result.update(rss_mb=rss, repeat=spec.repeat, group=spec.config)
    return {"group": rows, "rss_mb": rss}


def run_config(spec: Spec) -> dict[str, Any]:
    """Run one configuration in this process; add its peak RSS to the result."""
    os.makedirs(spec.workdir, exist_ok=True)
    if spec.group:
        return run_group(spec)
    import bench_real  # the rows of --suite real (imports this module)

    functions = {**FUNCTIONS, **bench_real.FUNCTIONS}
    if spec.config not in functions:
        raise ValueError(f"Expected one of {sorted(functions)}. Received: config={spec.config!r}")
    MEMORY_USE.clear()
    anon = AnonPeak()  # this worker's own baseline, after its imports, and its peak
    try:
        result = functions[spec.config](spec)
    finally:
        MEMORY_USE.update(anon.stop())
    result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    result.update(MEMORY_USE)  # anonymous RSS: baseline, peak; in-memory rows: decoded size
    result["examples_per_sec"] = result["examples"] / result["seconds"]
    return result


def worker_entry(spec: dict[str, Any], conn: Any) -> None:
    """Process target: run one configuration and send its result (or the error) back."""
    try:
        quiet()
        conn.send({"ok": True, **run_config(Spec(**spec))})
    except BaseException as exc:
        conn.send(_failure(exc))
    finally:
        conn.close()


def _failure(exc: BaseException) -> dict[str, Any]:
    """The reply a worker process sends back when its work raised."""
    import traceback

    return {
        "ok": False,
        "error": f"{type(exc).__name__}: {exc}",
        "traceback": traceback.format_exc(),
    }


def write_entry(directory: str, examples: int, seed: int, conn: Any) -> None:
    """Process target: write the data set, send its info and the library versions back."""
    import platform

    try:
        from bench_data import write_dataset

        info = write_dataset(directory, examples, seed)
        info.update(
            ok=True,
            tensorflow=tf.__version__,
            tf_keras=tf_keras.__version__,
            keras=keras.__version__,
            python=platform.python_version(),
        )
        conn.send(info)
    except BaseException as exc:
        conn.send(_failure(exc))
    finally:
        conn.close()


def real_entry(root: str, images: int, texts: int, seed: int, conn: Any) -> None:
    """Process target: write (or reuse) the data sets of ``--suite real``, send their info."""
    import bench_real

    bench_real.real_entry(root, images, texts, seed, conn)
