"""TensorFlow 2: ``FunctionLoop`` on Keras 3 models, strategies and multi-worker training.

The compiled multi-step loop and its runner (:mod:`.function_loop`), multi-worker
behaviour (:mod:`.distribute`: who this process is, global logs, chief-only writing, lost
workers) and preemption (:mod:`.preemption`).

The public names are imported from :mod:`tfr_hooks` itself (``tfr_hooks.distribute`` is
this package's :mod:`.distribute`).
"""

__all__: list[str] = []
