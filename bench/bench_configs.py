"""The benchmark's rows: names, descriptions and groups (no TensorFlow import here)."""

from __future__ import annotations

__all__ = [
    "ROWS",
    "DESCRIPTIONS",
    "MODEL_FREE",
    "REFERENCE",
    "INPUT_CEILINGS",
    "MODEL_CEILINGS",
    "LOOPS",
    "STREAMING_INPUTS",
    "MULTI_WORKER",
    "UNMEASURED",
    "GROUPS",
    "GROUP_OF",
    "REAL_ROWS",
    "REAL_KINDS",
    "REAL_REFERENCE",
    "REAL_INPUTS",
    "REAL_MODELS",
    "kind_of",
]

#: (name, description), in table order.
ROWS: list[tuple[str, str]] = [
    ("feed_dict_parse", "feed_dict, batches parsed in Python from the TFRecords"),
    ("feed_dict_memory", "feed_dict, batches sliced from in-memory arrays"),
    ("tf_keras_fit", "tf_keras model.fit on tf.data tensors (graph mode)"),
    ("keras3_fit", "Keras 3 model.fit on the tf.data pipeline"),
    ("keras3_fit_cb", "Keras 3 model.fit + ModelCheckpoint, EarlyStopping, TensorBoard"),
    ("keras3_fit_spe32", "Keras 3 model.fit, steps_per_execution=32"),
    ("keras3_fit_spe32_cb", "Keras 3 model.fit, steps_per_execution=32 + 3 callbacks"),
    (
        "keras3_fit_arrays",
        "Keras 3 model.fit on numpy arrays in memory, steps_per_execution=32 + 3 callbacks",
    ),
    ("bare_queue", "hand-written session loop, queue pipeline"),
    ("bare_dataset", "hand-written session loop, tf.data pipeline"),
    ("session_loop_queue", "SessionLoop, queue pipeline, no hooks"),
    ("session_loop_queue_cb", "SessionLoop, queue pipeline + 3 callbacks (KerasCallbacks)"),
    ("session_loop_dataset", "SessionLoop, tf.data pipeline, no hooks"),
    ("session_loop_dataset_cb", "SessionLoop, tf.data pipeline + 3 callbacks (KerasCallbacks)"),
    ("function_loop_1", "FunctionLoop, steps_per_execution=1, no hooks"),
    ("function_loop_1_cb", "FunctionLoop, steps_per_execution=1 + 3 callbacks"),
    ("function_loop_32", "FunctionLoop, steps_per_execution=32, no hooks"),
    ("function_loop_32_cb", "FunctionLoop, steps_per_execution=32 + 3 callbacks"),
    ("function_loop_8", "FunctionLoop, steps_per_execution=8, no hooks"),
    ("function_loop_128", "FunctionLoop, steps_per_execution=128, no hooks"),
    ("function_loop_auto", "FunctionLoop, steps_per_execution='auto', no hooks"),
    ("function_loop_auto_cb", "FunctionLoop, steps_per_execution='auto' + 3 callbacks"),
    (
        "session_loop_dataset_reinit",
        "SessionLoop, tf.data, no hooks, epochs end with the data (re-initialized)",
    ),
    (
        "function_loop_32_reinit",
        "FunctionLoop, spe=32, no hooks, epochs end with the data (new iterator)",
    ),
    (
        "function_loop_32_cached",
        "FunctionLoop, spe=32, no hooks, parsed batches cached in memory after epoch 1",
    ),
    ("session_loop_memory", "SessionLoop, in-memory pipeline (in_memory=True), no hooks"),
    ("session_loop_memory_cb", "SessionLoop, in-memory pipeline + 3 callbacks"),
    ("session_loop_packed", "SessionLoop, packed shards (128 a record), tf.data, no hooks"),
    ("session_loop_packed_cb", "SessionLoop, packed shards + 3 callbacks"),
    ("function_loop_32_memory", "FunctionLoop, spe=32, in-memory pipeline (in_memory=True)"),
    ("function_loop_32_memory_cb", "FunctionLoop, spe=32, in-memory pipeline + 3 callbacks"),
    ("function_loop_32_packed", "FunctionLoop, spe=32, packed shards (128 a record)"),
    ("function_loop_32_packed_cb", "FunctionLoop, spe=32, packed shards + 3 callbacks"),
    (
        "session_loop_memory_cb_unmeasured",
        "session_loop_memory_cb with measure_input=False (no input-wait timestamps), "
        "in one process with a measured twin, epochs in turn",
    ),
    (
        "function_loop_32_memory_cb_unmeasured",
        "function_loop_32_memory_cb with measure_input=False (no input-wait timestamps), "
        "in one process with a measured twin, epochs in turn",
    ),
    ("input_queue", "ceiling: queue pipeline alone (read + parse, no model)"),
    ("input_dataset", "ceiling: graph tf.data pipeline alone (read + parse, no model)"),
    ("input_tf2", "ceiling: TF2 tf.data pipeline alone, consumed in a tf.function loop"),
    ("input_memory", "ceiling: graph in-memory pipeline alone (gather, no model)"),
    ("input_memory_tf2", "ceiling: TF2 in-memory pipeline alone, in a tf.function loop"),
    ("input_packed", "ceiling: graph tf.data over packed shards alone (read + unpack)"),
    ("input_packed_tf2", "ceiling: TF2 tf.data over packed shards alone, tf.function loop"),
    ("model_only", "ceiling: model alone, graph session, one in-memory batch"),
    ("model_only_tf2", "ceiling: model alone, Keras 3 train_step x32 per tf.function call"),
    (
        "multi_worker_1",
        "FunctionLoop, spe=32 + 3 callbacks, MultiWorkerMirroredStrategy, 1 worker",
    ),
    (
        "multi_worker_2",
        "the same on 2 worker processes on loopback (this machine's 2 cores shared)",
    ),
]

#: The rows of ``--suite real`` (bench_real): JPEG images (``img_``) and token sequences
#: (``txt_``), each data set a table of its own, as a model is.
_MEMORY = "in_memory=True, map_fn decoded once (text: pad_to='longest')"
_PACKED = (
    "tfrecord.convert(examples_per_record=128) (images: map_fn=decode, raw pixels stored), "
    "then streamed (text: pad_to='longest')"
)
_BUCKETED = "in_memory=True, bucket_boundaries (the hand-written buckets), pad_to='longest'"
_PINNED = "trainer pinned to 1 core, tfrecord.dataset(map_fn=decode) read"
_SERVED = "through a tf.data service whose 1 worker is pinned to the other core"
_SMALL = "small data set (3,072 examples, each pass a new iterator, in a Dataset.reduce),"
_TFDS = "the images as a TFDS dir, tfds.builder_from_directory(dir)"
REAL_ROWS: list[tuple[str, str]] = [
    ("img_fit_hand", "Keras 3 fit, spe=32 + 3 callbacks, hand-written tf.data (guide)"),
    ("img_loop_stream", "FunctionLoop, spe=32 + 3 callbacks, tfrecord.dataset(map_fn=decode)"),
    ("img_loop_memory", f"FunctionLoop, spe=32 + 3 callbacks, in memory: {_MEMORY}"),
    ("img_loop_packed", f"FunctionLoop, spe=32 + 3 callbacks, packed: {_PACKED}"),
    ("img_loop_memory_1", "img_loop_memory with steps_per_execution=1"),
    ("img_loop_memory_auto", "img_loop_memory with steps_per_execution='auto'"),
    ("img_session_memory", f"SessionLoop + 3 callbacks (tf_keras, graph mode), {_MEMORY}"),
    ("img_model_only", "ceiling: model alone, train_step x32 per call on 8 held batches"),
    ("img_input_hand", "input alone: hand-written tf.data (parse + decode_jpeg map)"),
    ("img_input_hand_cached", "input alone: the same + .cache() after decode, later passes"),
    ("img_input_stream", "input alone: tfrecord.dataset(map_fn=decode)"),
    ("img_input_memory", f"input alone, in memory: {_MEMORY}"),
    ("img_input_packed", f"input alone, packed: {_PACKED}"),
    ("img_input_tfds", f"input alone: {_TFDS} .as_dataset(split, as_supervised=True)"),
    ("img_input_tfds_cached", f"input alone: {_TFDS} .as_dataset(...) + .cache(), later passes"),
    ("img_input_tfds_stream", "input alone: tfrecord.dataset(TFDS dir, split='train')"),
    ("img_input_tfds_memory", "input alone: tfrecord.dataset(TFDS dir, split=, in_memory=True)"),
    ("img_loop_tfds_cached", f"FunctionLoop, spe=32 + 3 callbacks, {_TFDS} + .cache()"),
    ("img_loop_tfds_memory", "FunctionLoop, spe=32 + 3 callbacks, TFDS dir, in_memory=True"),
    (
        "img_input_small_cached",
        f"input alone, {_SMALL} 40x40x3 uint8 images: hand-written .unbatch().cache().shuffle(n)",
    ),
    ("img_input_small_memory", f"input alone, {_SMALL} 40x40x3 uint8 images: in_memory=True"),
    *(
        row
        for size, count in (("", "3,072"), ("_30k", "30,720"))
        for row in (
            (
                f"img_input_small_cached_f32{size}",
                f"input alone, {count} 40x40x3 uint8 images through map_fn -> float32 / 255 "
                "(each pass a new iterator): hand-written .unbatch().cache().shuffle(n)",
            ),
            (
                f"img_input_small_memory_f32{size}",
                f"input alone, {count} 40x40x3 uint8 images through map_fn -> float32 / 255 "
                "(each pass a new iterator): in_memory=True",
            ),
        )
    ),
    (
        "img_input_small_digits_cached",
        f"input alone, {_SMALL} 784-byte digit rows: hand-written .unbatch().cache().shuffle(n)",
    ),
    ("img_input_small_digits_memory", f"input alone, {_SMALL} 784-byte digit rows: in_memory=True"),
    ("img_input_1core", f"input alone, {_PINNED} locally"),
    ("img_input_1core_service", f"input alone, {_PINNED} {_SERVED}"),
    ("img_loop_1core", f"FunctionLoop, spe=32 + 3 callbacks, {_PINNED} locally"),
    ("img_loop_1core_service", f"FunctionLoop, spe=32 + 3 callbacks, {_PINNED} {_SERVED}"),
    ("txt_fit_padded", "Keras 3 fit, spe=32 + 3 callbacks, hand-written tf.data, padded_batch"),
    ("txt_fit_bucketed", "the same with bucket_by_sequence_length"),
    ("txt_loop_stream", "FunctionLoop, spe=32 + 3 callbacks, tfrecord.dataset, pad_to='longest'"),
    ("txt_loop_stream_bucketed", "txt_loop_stream with bucket_boundaries (sorted pools)"),
    ("txt_loop_memory", f"FunctionLoop, spe=32 + 3 callbacks, in memory: {_MEMORY}"),
    ("txt_loop_packed", f"FunctionLoop, spe=32 + 3 callbacks, packed: {_PACKED}"),
    ("txt_loop_memory_1", "txt_loop_memory with steps_per_execution=1"),
    ("txt_loop_memory_auto", "txt_loop_memory with steps_per_execution='auto'"),
    ("txt_loop_memory_bucketed", f"FunctionLoop, spe=32 + 3 callbacks, {_BUCKETED}"),
    ("txt_session_memory_bucketed", f"SessionLoop + 3 callbacks (graph mode), {_BUCKETED}"),
    ("txt_model_only", "ceiling: model alone, train_step x32 per call on 8 held batches"),
    ("txt_input_padded", "input alone: hand-written tf.data, padded_batch"),
    ("txt_input_bucketed", "input alone: hand-written tf.data, bucket_by_sequence_length"),
    ("txt_input_padded_cached", "input alone: padded_batch + .cache() after parse, later passes"),
    ("txt_input_stream", "input alone: tfrecord.dataset, pad_to='longest'"),
    ("txt_input_stream_bucketed", "input alone: tfrecord.dataset, bucket_boundaries, pad_to"),
    ("txt_input_memory_bucketed", f"input alone, {_BUCKETED}"),
    ("txt_input_memory", f"input alone, in memory: {_MEMORY}"),
    ("txt_input_packed", f"input alone, packed: {_PACKED}"),
]
#: The tables of the real suite, by row-name prefix, and what each holds.
REAL_KINDS = {"img": "JPEG images, small CNN", "txt": "token sequences, embedding + pooling"}
#: The reference of each real table (the ratios' "x fit" column).
REAL_REFERENCE = {"img": "img_fit_hand", "txt": "txt_fit_padded"}
#: The input rows of the real data sets (the small data sets' rows, of other data, aside).
REAL_INPUTS = tuple(
    name
    for name, _ in REAL_ROWS
    if "_input_" in name and "_small" not in name and "_1core" not in name
)
REAL_MODELS = ("img_model_only", "txt_model_only")


def kind_of(config: str) -> str | None:
    """``"img"`` or ``"txt"`` for a row of the real suite, ``None`` for a digits row."""
    prefix = config.split("_", 1)[0]
    return prefix if prefix in REAL_KINDS and config in dict(REAL_ROWS) else None


DESCRIPTIONS = dict(ROWS) | dict(REAL_ROWS)

#: Rows that run no model: measured once, shown under every model.
MODEL_FREE = (
    "input_queue",
    "input_dataset",
    "input_tf2",
    "input_memory",
    "input_memory_tf2",
    "input_packed",
    "input_packed_tf2",
)
#: What a user would pick instead: every row is also shown as a ratio to it.
REFERENCE = "keras3_fit"
INPUT_CEILINGS = MODEL_FREE
#: Input rows of the pipelines that existed before the in-memory and packed ones.
STREAMING_INPUTS = ("input_queue", "input_dataset", "input_tf2")
MODEL_CEILINGS = ("model_only", "model_only_tf2")
#: Rows run as a cluster of N worker processes on loopback ports: row -> N.
MULTI_WORKER = {"multi_worker_1": 1, "multi_worker_2": 2}
#: The rows run without the input measurement -> the same row with it (the pair that
#: prices it: same loop, data, steps_per_execution and callbacks). Each such row runs
#: its loop beside a measured twin in one process, their epochs in turn
#: (bench_workloads.paired_cost), and the cost is read from that pair.
UNMEASURED = {
    "session_loop_memory_cb_unmeasured": "session_loop_memory_cb",
    "function_loop_32_memory_cb_unmeasured": "function_loop_32_memory_cb",
}
#: Rows run together in one worker process, their epochs in turn (bench_turns): a
#: target between two rows of one group reads the median of the rounds' ratios, a
#: paired reading, instead of a ratio of medians over separate processes (whose spreads
#: crossed most targets). Each row is in at most one group; a group runs only when two
#: or more of its rows are asked for.
GROUPS = {
    "group_graph_memory": (
        "session_loop_memory",
        "session_loop_memory_cb",
        "model_only",
        "feed_dict_memory",
    ),
    "group_tf2_memory": (
        "function_loop_32_memory",
        "function_loop_32_memory_cb",
        "function_loop_32_cached",
        "model_only_tf2",
        "keras3_fit_arrays",
    ),
    "group_graph_stream": (
        "session_loop_queue",
        "session_loop_dataset",
        "bare_queue",
        "bare_dataset",
        "feed_dict_parse",
    ),
    "group_fit_peers": (
        "function_loop_1_cb",
        "keras3_fit_cb",
        "function_loop_32_cb",
        "keras3_fit_spe32_cb",
    ),
}
#: Row -> its group.
GROUP_OF = {row: group for group, rows in GROUPS.items() for row in rows}
#: The package's loops.
LOOPS = (
    "session_loop_queue",
    "session_loop_queue_cb",
    "session_loop_dataset",
    "session_loop_dataset_cb",
    "function_loop_1",
    "function_loop_1_cb",
    "function_loop_32",
    "function_loop_32_cb",
    "function_loop_8",
    "function_loop_128",
    "function_loop_auto",
    "function_loop_auto_cb",
    "session_loop_dataset_reinit",
    "function_loop_32_reinit",
    "function_loop_32_cached",
    "session_loop_memory",
    "session_loop_memory_cb",
    "session_loop_packed",
    "session_loop_packed_cb",
    "function_loop_32_memory",
    "function_loop_32_memory_cb",
    "function_loop_32_packed",
    "function_loop_32_packed_cb",
    *UNMEASURED,
)
