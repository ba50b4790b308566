"""SessionLoop's runner: one ``session.run`` a step, with the hooks' fetches merged in.

The engine (:mod:`tfr_hooks.engine`) fires every hook event; this runner creates (or
takes) the session, runs the data's initializers at each pass, runs each step with what
the hooks asked for (:mod:`tfr_hooks.graph.hooked_run`), and reports the data's end (an
``OutOfRangeError``) and a stalled read through a tf.data service (a step's
``timeout_in_ms`` of ``service_timeout``, the service asked why) to the engine, which
decides what follows (:class:`~tfr_hooks.stalls.StallPolicy`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tfr_hooks.graph.cluster import ClusterSession
from tfr_hooks.graph.hooked_run import merged_run, prepared_run
from tfr_hooks.graph.metrics import RunningMeans
from tfr_hooks.graph.packed_fetches import PackedFetches
from tfr_hooks.graph.setup import initialize_uninitialized
from tfr_hooks.graph.validation import Validation
from tfr_hooks.runners import StepResult
from tfr_hooks.service.watch import Reason, diagnose

__all__ = ["RunSettings", "SessionRunner"]

logger = logging.getLogger(__name__)

_v1 = tf.compat.v1


@dataclass(frozen=True)
class RunSettings:
    """What a :class:`SessionLoop` run's runner is given: the graph's parts and settings.

    Attributes:
        graph: The train op's graph.
        train_op: What each step runs.
        hooks: The run's hooks, for error messages about their feeds.
        means: The running means of the training fetches.
        batch_size: The batch size tensor, or ``None`` to count steps.
        initializers: Ops that restart the training data.
        validation: The validation pass, or ``None``.
        val_means: The running means of the validation fetches (with ``validation``).
        session_config: The ``ConfigProto`` of a session the runner creates.
        run_timeout_secs: The timeout of each step, or ``None``.
        service: The tf.data service address the input is read through, or ``None``.
        service_timeout: The bound of a step reading through ``service``, seconds.
        epochs_restart: Whether each epoch starts a new pass (no ``steps_per_epoch``).
        cluster: Creates the session on a cluster's master, or ``None``.
        pass_examples: The examples of one pass of a queue stream the loop splits into
            epochs, or ``None``.
        input_wait: The tensor of the seconds a step waits for its input (see
            :mod:`tfr_hooks.graph.input_wait`), or ``None`` when it is not measured.
        packed: The step's scalar fetches (means, batch size, input wait) as one tensor
            (:mod:`tfr_hooks.graph.packed_fetches`), fetched instead of their dict; ``None``
            (or a pack with no tensor) to fetch the dict.
        skip_tensor: A tensor computed from each batch of the training data (its batch
            size), run to pass over a batch without a step when a run resumes mid-epoch;
            ``None`` when the loop cannot skip batches exactly (a queue pipeline, data
            the loop was not given, epochs counted in steps).
    """

    graph: Any
    train_op: Any
    hooks: list[Any]
    means: RunningMeans
    batch_size: Any
    initializers: list[Any]
    validation: Validation | None
    val_means: RunningMeans | None
    session_config: Any
    run_timeout_secs: float | None
    service: str | None
    service_timeout: float
    epochs_restart: bool
    cluster: ClusterSession | None
    pass_examples: int | None
    input_wait: Any = None
    packed: PackedFetches | None = None
    skip_tensor: Any = None


class SessionRunner:
    """The engine's runner for :class:`~tfr_hooks.SessionLoop`: one ``session.run`` a step."""

    def __init__(self, settings: RunSettings, session: Any) -> None:
        self.settings = settings
        self.reinitializable = bool(settings.initializers)
        # a session finds the end of the data only by an OutOfRangeError, except for the
        # end of an epoch of a queue stream the loop splits: a pass's worth of examples
        self.ran_out = False
        self.pass_examples = settings.pass_examples
        if self.pass_examples is not None:
            self.reinitializable = True  # each epoch goes on with the stream's next pass
        self.seen = 0  # examples of the stream run so far
        self.running = threading.Event()  # a session.run of the loop's is under way
        self.boundary = 0  # where the current epoch ends in the stream
        self.session = session
        self.owns_session = session is None
        self.coord: Any = None
        self.fetches: dict[str, Any] = {
            "train_op": settings.train_op,
            "logs": settings.means.update,
        }
        if settings.batch_size is not None:
            self.fetches["batch_size"] = settings.batch_size
        if settings.input_wait is not None:
            self.fetches["input_wait"] = settings.input_wait
        self.options = None
        timeout = settings.run_timeout_secs
        if settings.service is not None:  # TensorFlow never ends a read of a lost service
            timeout = min(timeout or settings.service_timeout, settings.service_timeout)
        if timeout is not None:
            self.options = _v1.RunOptions(timeout_in_ms=int(timeout * 1000))
        self.run_args = _v1.train.SessionRunArgs(self.fetches, None, self.options)
        # what a step fetches: the scalars packed into one tensor where they can be (a
        # hook's fetches or feeds join it in the merged session.run), else the dict
        packed = settings.packed
        self.packed = packed if packed is not None and packed.tensor is not None else None
        self.step_fetches: Any = self.fetches if self.packed is None else self.packed.tensor
        self.fast_run: Callable[[], Any] | None = None
        #: the engine skips batches of a resumed epoch only where that is exact
        self.skips_batches = settings.skip_tensor is not None
        #: a queue stream is not restarted, and data without initializers cannot be
        self.replays_passes = self.pass_examples is None and bool(settings.initializers)

    def start(self) -> None:
        """Prepare to run (see :meth:`tfr_hooks.runners.Runner.start`)."""
        settings = self.settings
        if settings.cluster is not None:  # the chief initializes or restores, others wait
            self.session = settings.cluster.create()
        else:
            if self.session is None:
                self.session = _v1.Session(graph=settings.graph, config=settings.session_config)
            initialize_uninitialized(self.session)
        self.coord = _v1.train.Coordinator()  # the run's one coordinator
        self.fast_run = prepared_run(self.session, self.step_fetches, self.options)

    def start_epoch(self, restart_data: bool) -> None:
        """Reset the epoch's means; restart the data when asked."""
        if self.pass_examples is not None:
            self.boundary += self.pass_examples
            self.ran_out = self.seen >= self.boundary
        ops = [self.settings.means.reset]
        if restart_data:
            ops.extend(self.settings.initializers)
            if self.pass_examples is None:
                self.ran_out = False  # a new pass; its end is found by its OutOfRangeError
        self.session.run(ops)

    def start_pass(self) -> None:
        """Start a pass over the training data and leave it: run its initializers.

        The graph-mode ``read_batches(pipeline="dataset")`` pipelines (streamed, packed
        shards, in memory) reshuffle every pass: they draw each pass's seed from a
        stateful random op when their iterator is initialized, so epoch E of a run gets
        the order of the session's (E+1)-th initialization. A run resumed at epoch E in a
        new session has the engine start E passes first, so that its first epoch gets its
        own order, as in an uninterrupted run. Each costs an initialization (it starts a
        pass and drops it: the first batch a prefetch may have begun, a shuffle buffer's
        fill when streamed), not an epoch of input. Unshuffled data is not changed by it.
        """
        self.session.run(self.settings.initializers)

    def skip_batches(self, count: int) -> tuple[int, int]:
        """Pass over the next ``count`` training batches without a step.

        A run resumed mid-epoch starts the epoch's data again (after the engine replayed
        the earlier passes, :meth:`start_pass`) and drops the batches the interrupted run
        trained on: the same ones, as the order of the pass is the same (no shuffle, or a
        seeded one). Each batch is pulled through the data's batch size tensor, one
        ``session.run`` each: it costs the input work of those batches (reading and
        parsing streamed shards, a gather in memory) and a run's overhead, not their steps.
        Through a tf.data service the pass is a new job, whose order is not the
        interrupted one's: the epoch's steps and examples are still exact, not which
        examples it trains. Each pull is bounded like a step (``service_timeout``).

        Returns:
            The batches skipped (fewer than ``count`` if the data ran out) and their
            examples.

        Raises:
            ConnectionError: A pull through a tf.data service waited ``service_timeout``
                (its workers or dispatcher are gone), naming the service and why.
        """
        # bounded as a step is: a read through a service that lost its workers never ends
        pull = prepared_run(self.session, self.settings.skip_tensor, self.options)
        skipped = examples = 0
        while skipped < count:
            try:
                with self._running():
                    examples += int(pull())
            except tf.errors.OutOfRangeError:
                self.ran_out = True
                break
            except tf.errors.DeadlineExceededError as error:
                self._stall_of(error, restarts=True)
                self.ran_out = True  # a lost worker's share: the pass ends here
                break
            skipped += 1
        return skipped, examples

    def run_step(
        self, hook_args: Sequence[Any], limit: int, examples_left: int | None = None
    ) -> StepResult:
        """Run up to ``limit`` training steps (see :meth:`tfr_hooks.runners.Runner.run_step`)."""
        # one step a session.run: the engine ends a bounded pass before a step past it
        try:
            with self._running():
                result = merged_run(
                    self.session,
                    self.settings.hooks,
                    hook_args,
                    self.step_fetches,
                    options=self.options,
                    fast_run=self.fast_run,
                )
        except tf.errors.OutOfRangeError:
            return StepResult(exhausted=True)
        except tf.errors.DeadlineExceededError as error:
            restarts = self.replays_passes and self.settings.epochs_restart
            return StepResult(exhausted=True, stall=self._stall_of(error, restarts=restarts))
        if self.packed is not None:
            result.results = self.packed.unpack(result.results)
        result.logs = result.results["logs"]
        result.examples = int(result.results.get("batch_size", 1))
        if "input_wait" in result.results:
            result.input_wait = float(result.results["input_wait"])
        if self.pass_examples is not None:
            self.seen += result.examples
            self.ran_out = self.seen >= self.boundary
        return result

    def start_validation(self) -> bool:
        """Restart the validation data and its means; ``False`` when there is none."""
        self.ran_out = False  # the validation data's end is found by its OutOfRangeError
        validation, means = self.settings.validation, self.settings.val_means
        if validation is None or means is None:
            return False
        self.session.run([means.reset, *validation.initializers])
        return True

    def run_validation_step(self, limit: int) -> StepResult:
        """Run up to ``limit`` validation steps; ``steps=0`` when the data ran out."""
        means = self.settings.val_means
        assert means is not None  # start_validation said there is one
        try:
            with self._running():
                logs = self.session.run(means.update, options=self.options)
        except tf.errors.OutOfRangeError:
            return StepResult(exhausted=True)
        except tf.errors.DeadlineExceededError as error:
            return StepResult(exhausted=True, stall=self._stall_of(error, restarts=True))
        return StepResult(steps=1, logs=logs)

    def cancel(self) -> bool:
        """End the ``session.run`` under way, from another thread: close the session.

        A graph-mode step cannot be cancelled alone: closing the session cancels its
        steps (``DirectSession::Close``), the blocked step fails, and the run ends
        (the hooks' ``end`` get the closed session). Queue pipelines are unblocked
        more gently first, by their :class:`~tfr_hooks.QueueRunnerHook`.

        Returns:
            Whether a step was under way to cancel.
        """
        if not self.running.is_set() or self.session is None:
            return False
        logger.warning("Closing the session to end the step blocked on its input")
        self.session.close()
        return True

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        self.running.set()
        try:
            yield
        finally:
            self.running.clear()

    def _stall_of(self, error: BaseException, *, restarts: bool) -> str:
        """Why a step that timed out stalled (a lost worker's share), or raise.

        A step through a tf.data service that lost a worker, its workers or its
        dispatcher waits forever (TensorFlow 2.21); its ``timeout_in_ms`` ended it: the
        service is asked why (:func:`~tfr_hooks.service.watch.diagnose`). With workers
        alive and a pass the loop can start again, the pass stalled: the engine ends it
        (:class:`~tfr_hooks.stalls.StallPolicy`).

        Returns:
            The stall, for ``StepResult.stall``.

        Raises:
            DeadlineExceededError: ``error``, for a step not read through a service
                (``run_timeout_secs``).
            ConnectionError: Naming the service's address and why the step waited: the
                dispatcher is gone, no worker is left, or the pass cannot be restarted.
        """
        address = self.settings.service
        if address is None:
            raise error
        bound = self.settings.service_timeout
        reason = diagnose(address, bound)
        message = f"tf.data service at {address}: {reason.describe(bound)}"
        if reason is Reason.STALLED and restarts:
            return message
        raise ConnectionError(
            f"{message}. A step waited {bound:g} s (service_timeout) for its batch; restart "
            "the service's servers and resume the run."
        ) from error

    def finish(self) -> None:
        """End-of-training work before the hooks' ``end``."""
        pass  # nothing to finalize in a graph: the train op already wrote the variables

    def close(self) -> None:
        """Release what the run holds, after the hooks' ``end``."""
        if self.coord is not None:
            self.coord.request_stop()  # threads a user hook started on it
        if self.owns_session and self.session is not None:
            self.session.close()
