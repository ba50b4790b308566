"""The in-memory pipeline: decode the shards once, then gather batches by index.

When the decoded data fits in memory, the fastest parse is the one that never happens:
:func:`.loading.load` reads and decodes every shard once (in parallel, one thread per core), into
one numpy array per feature, and :func:`.serve.memory_dataset` serves batches by gathering rows
of those arrays, each epoch along the order ``shuffle`` names: with ``"global"`` a fresh
permutation of all the examples (what Keras ``fit`` does for numpy arrays), with ``N``
the indices through a shuffle buffer of ``N`` (as streamed), with ``None`` the stored
order. There is no per-example ``tf.data`` element: each
element of the pipeline is a slice of the order (several batches' worth), gathered
with one ``tf.gather`` per feature and cut into batches with ``rebatch``. Small dense
data (up to :data:`.serve.WHOLE_PASS_BYTES`) is gathered a whole pass at a time by one function
(the next pass while this one is consumed): every function a pass's pipeline runs costs
milliseconds to start at each new iterator, which is most of a pass over a few thousand
examples (bench/memory_epoch_cost.py measures it).

The arrays reach TensorFlow through a ``tf.numpy_function`` evaluated once per pass
(at each new iterator, or each initialization of a graph-mode iterator), which hands
numpy's 64-byte-aligned buffers over without a copy: the data is never embedded in a
graph or serialized with the dataset (no ``GraphDef`` 2 GB limit, no copy when tf.data
rewrites its graph) and lives in memory once. Small dense data gathered whole, in
TF2, is instead made eager tensors once, inputs of the gather function (a new iterator
then calls no Python), and its pipeline turns tf.data's default graph rewrites off: a
rewrite at each new iterator cost milliseconds and serialized those tensors (32 MiB at
most) into the rewritten graph. Its gather is a single-device function
(:func:`.serve.single_device_map`): Grappler does not optimize it anew at each iterator.

The package holds five concepts, one module each: :mod:`.allocator` (the C
allocator's free memory, handed back after the load),
:mod:`.estimate` (the budget, and the bytes the data takes: decoded, parsed,
``map_fn``'s output; example counts),
:mod:`.loading` (reading and decoding into the held arrays), :mod:`.narrow` (``uint8``
images held as such where ``map_fn`` only casts them to float and scales them, cast
again each batch) and :mod:`.serve` (batches gathered from them). Each name has one
address, in its module: this package re-exports nothing.
"""

__all__: list[str] = []
