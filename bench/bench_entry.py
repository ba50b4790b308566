"""Worker process targets, importable without TensorFlow (the parent never imports it).

The fork server preloads ``bench_workloads`` (TensorFlow, tf_keras, Keras, tfr_hooks), so
the import inside each target is free in a forked worker.
"""

from __future__ import annotations

from typing import Any

__all__ = ["worker_entry", "write_entry", "real_entry", "positions_entry", "versions_entry"]


def worker_entry(spec: dict[str, Any], conn: Any) -> None:
    """Run one configuration and send its result (or its error) through ``conn``."""
    import bench_workloads

    bench_workloads.worker_entry(spec, conn)


def write_entry(directory: str, examples: int, seed: int, conn: Any) -> None:
    """Write the data set and send its info (or the error) through ``conn``."""
    import bench_workloads

    bench_workloads.write_entry(directory, examples, seed, conn)


def real_entry(root: str, images: int, texts: int, seed: int, conn: Any) -> None:
    """Write (or reuse) the data sets of ``--suite real``; send their info through ``conn``."""
    import bench_workloads

    bench_workloads.real_entry(root, images, texts, seed, conn)


def positions_entry(spec: dict[str, Any], conn: Any) -> None:
    """Run ``--suite positions`` (:func:`positions.measure`); send its result through ``conn``."""
    import platform
    import traceback

    import bench_workloads

    try:
        bench_workloads.quiet()
        import positions

        conn.send({"ok": True, "python": platform.python_version(), **positions.measure(spec)})
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        conn.send({"ok": False, "error": error, "traceback": traceback.format_exc()})
    finally:
        conn.close()


def versions_entry(conn: Any) -> None:
    """Send the versions of TensorFlow, tf_keras, Keras and Python through ``conn``."""
    import platform

    import bench_workloads

    tf, keras, tf_keras = bench_workloads.tf, bench_workloads.keras, bench_workloads.tf_keras
    conn.send(
        {
            "ok": True,
            "tensorflow": tf.__version__,
            "tf_keras": tf_keras.__version__,
            "keras": keras.__version__,
            "python": platform.python_version(),
        }
    )
    conn.close()
