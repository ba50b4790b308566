"""Graph mode: ``SessionLoop`` and everything that exists only for ``tf.compat.v1`` graphs.

The loop and its runner (:mod:`.session_loop`), the merged hooked ``session.run``
(:mod:`.hooked_run`), :func:`~tfr_hooks.hooked_session` for scripts that keep their own
loop (:mod:`.hooked_session`), the variables, saver and input hooks a graph needs
(:mod:`.setup`), validation on a second pipeline (:mod:`.validation`), running means in
the graph (:mod:`.metrics`), the one owner of the input queues (:mod:`.queue_runners`),
:class:`~tfr_hooks.EpochCheckpoint` (:mod:`.checkpoint`), the ``tf_keras`` training graph
(:mod:`.keras_graph`) and ``tf.compat.v1.train.Server`` clusters (:mod:`.cluster`).

The public names are imported from :mod:`tfr_hooks` itself.
"""

__all__: list[str] = []
