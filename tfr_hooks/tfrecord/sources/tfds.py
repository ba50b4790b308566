"""TensorFlow Datasets (TFDS) prepared directories as a source, read as TFDS meant them.

A directory that ``tfds`` prepared (``<data_dir>/<name>/<version>/``) holds the shards of
each split (TFRecord or, with ``file_format="array_record"``, ArrayRecord files),
``dataset_info.json`` (the splits, their shards' example counts, the file name template,
the supervised keys) and ``features.json`` (each feature's kind, dtype, shape and
encoding), plus a ``<feature>.labels.txt`` beside each named ``ClassLabel``.
:func:`open_tfds_dir` recognizes one (or a dataset directory holding one version);
:class:`TfdsSource` is the source the dispatcher asks first: the split's shards, their
exact example counts, its plain :class:`Schema` of the features returned, and a
:class:`TfdsDecoding` (a value the readers carry beside the schema) that decodes them.
This is the only module that knows a TFDS file name.

TFDS writes ``tf.train.Example``s whose nested keys are flattened with ``/``; the readers
return the same flat keys (``objects/bbox``, ``steps/observation/image``), each as:

| TFDS feature | read as |
|---|---|
| ``Image`` | decoded (PNG, JPEG...) to its dtype and shape; of unknown size: bytes |
| ``ClassLabel`` | int64; the names of its ``labels.txt`` in ``TfdsDecoding.labels`` |
| ``Tensor`` | its dtype and shape (also when stored as bytes or zlib) |
| ``BBoxFeature``, ``Text`` | float32 ``[4]``, string |
| ``Sequence``, ``Dataset`` | a feature list, ragged: ``[batch, (boxes), 4]`` |
| a sequence of sequences | ragged in two levels ``[batch, (sequences), (values)]`` |
| anything else | a ``ValueError`` naming the feature and its kind |

An image of unknown height, width or channels stays encoded bytes, with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from tfr_hooks.tfrecord.errors import CorruptRecordError, NoFilesError
from tfr_hooks.tfrecord.formats.arrayrecord import ArrayRecordFiles
from tfr_hooks.tfrecord.formats.framing import check_framing, detect_compression, first_record
from tfr_hooks.tfrecord.schema.decode import decode_images, inflate
from tfr_hooks.tfrecord.schema.schema import Feature, Schema
from tfr_hooks.tfrecord.sources.base import Checked, RecordSource, SchemaLike

__all__ = [
    "TfdsDir",
    "TfdsDecoding",
    "TfdsSource",
    "TfdsSplit",
    "is_tfds_dir",
    "open_tfds_dir",
]

logger = logging.getLogger(__name__)

INFO_FILENAME = "dataset_info.json"
FEATURES_FILENAME = "features.json"
_DEFAULT_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
_IMAGE_DTYPES = ("uint8", "uint16")


def is_tfds_dir(path: str) -> bool:
    """Whether ``path`` is a directory TFDS prepared (it holds both JSON files)."""
    return all(
        tf.io.gfile.exists(os.path.join(path, n)) for n in (INFO_FILENAME, FEATURES_FILENAME)
    )


def _version_dir(path: str) -> str | None:
    """The TFDS version directory ``path`` stands for, or ``None`` if it is none."""
    if is_tfds_dir(path):
        return path
    versions = sorted(
        name.rstrip("/")
        for name in tf.io.gfile.listdir(path)
        if re.fullmatch(r"\d+\.\d+\.\d+/?", name) and is_tfds_dir(os.path.join(path, name))
    )
    if not versions:
        return None
    if len(versions) > 1:
        raise ValueError(
            f"Expected a TFDS version directory, or a dataset directory holding one version; "
            f"{path!r} holds the versions {versions}. Pass one of them, e.g. "
            f"{os.path.join(path, versions[-1])!r}. Received: files={path!r}"
        )
    return os.path.join(path, versions[0])


# --- the features -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Part:
    """How one returned feature is built from the stored (parsed) ones.

    ``how``: ``"plain"`` (as read), ``"image"`` (decoded), ``"tensor_bytes"`` (raw bytes,
    ``zlib`` when compressed), ``"frames"`` (a sequence: a list cut into elements of
    ``feature.shape``) or ``"nested"`` (a sequence of sequences: values, row lengths).
    """

    feature: Feature
    how: str
    stored: tuple[str, ...]
    zlib: bool = False
    image_format: str = ""  # an image's encodingFormat ("png", "jpeg"), "" when not given


class _Mapper:
    """Walks ``features.json`` into the returned features and the stored ones."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.parts: list[_Part] = []
        self.labels: dict[str, tuple[str, ...]] = {}

    def walk(self, node: Mapping[str, Any], key: str, depth: int) -> None:
        kind = str(node.get("pythonClassName", "")).rsplit(".", 1)[-1]
        if kind in ("FeaturesDict", "") and "featuresDict" in node:
            for name, child in node["featuresDict"]["features"].items():
                self.walk(child, f"{key}/{name}" if key else name, depth)
        elif kind in ("Sequence", "Dataset") and "sequence" in node:
            self.walk(node["sequence"]["feature"], key, depth + 1)
        elif kind in ("Image", "LabeledImage") and "image" in node:
            self.image(node["image"], key, depth)
        elif kind == "ClassLabel":
            self.leaf(key, "int64", (), depth)
            self.read_labels(key)
        elif kind == "Tensor" or (kind == "Scalar" and "tensor" in node):
            self.tensor(node["tensor"], key, depth)
        elif kind == "BBoxFeature":
            self.leaf(key, "float32", (4,), depth)
        elif kind == "Text":
            self.leaf(key, "string", (), depth)
        else:
            raise ValueError(
                f"Expected the features of a TFDS directory to be Image, ClassLabel, Tensor, "
                f"BBoxFeature, Text, Sequence, Dataset or FeaturesDict; feature {key!r} of "
                f"{os.path.join(self.directory, FEATURES_FILENAME)!r} is a "
                f"{kind or 'feature of unknown kind'}, which the package cannot decode. "
                f"Received: {key}={node.get('pythonClassName')!r}"
            )

    def read_labels(self, key: str) -> None:
        path = os.path.join(self.directory, key.replace("/", "-") + ".labels.txt")
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as handle:
                self.labels[key] = tuple(line.rstrip("\n") for line in handle if line.strip())

    def leaf(self, key: str, dtype: str, shape: tuple[int, ...], depth: int) -> None:
        """A feature stored as a list of values: ``dtype`` of ``shape`` per element."""
        if depth == 0:
            feature = Feature(key, dtype, shape, _list_encoding(dtype))
            self.parts.append(_Part(feature, "plain", (key,)))
        elif depth == 1:
            self.parts.append(_Part(Feature(key, dtype, shape, sequence=True), "frames", (key,)))
        elif depth == 2 and shape == ():
            values, lengths = f"{key}/ragged_flat_values", f"{key}/ragged_row_lengths_0"
            view = Feature(key, dtype, (None,), sequence=True)
            self.parts.append(_Part(view, "nested", (values, lengths)))
        else:
            raise ValueError(
                f"Expected the features of a TFDS directory to nest sequences at most twice, "
                f"and only scalars in two levels; feature {key!r} is {depth} sequences deep "
                f"of shape {shape}. Received: {key}=sequence depth {depth}"
            )

    def image(self, info: Mapping[str, Any], key: str, depth: int) -> None:
        shape = _shape(info.get("shape", {}))
        dtype = str(info.get("dtype", "uint8"))
        fixed = len(shape) == 3 and None not in shape
        if not fixed or dtype not in _IMAGE_DTYPES or depth > 1:
            logger.warning(
                "TFDS image %r (dtype %s, shape %s) is read as its encoded bytes: only "
                "images of a fixed shape (height, width, channels) and dtype %s outside "
                "nested sequences are decoded. Decode it in map_fn (tf.io.decode_image).",
                key,
                dtype,
                shape,
                " or ".join(_IMAGE_DTYPES),
            )
            self.leaf(key, "string", (), depth)
            return
        sized = tuple(int(d) for d in shape if d is not None)
        view = Feature(key, dtype, sized, sequence=depth == 1)
        image_format = str(info.get("encodingFormat") or "").lower()
        self.parts.append(_Part(view, "image", (key,), image_format=image_format))

    def tensor(self, info: Mapping[str, Any], key: str, depth: int) -> None:
        shape = _shape(info.get("shape", {}))
        dtype = str(info.get("dtype", "float32"))
        encoding = str(info.get("encoding", "none")).lower()
        if dtype in ("string", "object", "str"):
            dtype = "string"
        if encoding == "none":
            if shape == (None,) and depth == 0:
                self.leaf(key, dtype, (), 1)  # one varying list: the same as a sequence
                return
            if None in shape:
                raise ValueError(
                    f"Expected TFDS tensor {key!r} to have a fixed shape, or one varying "
                    f"dimension alone. Received: {key}=shape {shape}"
                )
            self.leaf(key, dtype, tuple(int(d) for d in shape if d is not None), depth)
            return
        if depth or None in shape or encoding not in ("bytes", "zlib"):
            raise ValueError(
                f"Expected TFDS tensor {key!r} stored as {encoding!r} to have a fixed shape "
                f"and be outside sequences. Received: {key}=shape {shape}, depth {depth}"
            )
        view = Feature(key, dtype, tuple(int(d) for d in shape if d is not None))
        self.parts.append(_Part(view, "tensor_bytes", (key,), zlib=encoding == "zlib"))


def _shape(info: Mapping[str, Any]) -> tuple[int | None, ...]:
    return tuple(None if int(d) < 0 else int(d) for d in info.get("dimensions", []))


@dataclass(frozen=True)
class TfdsDecoding:
    """How the records of a TFDS directory become its features, as a declared value.

    Its :attr:`schema` is what the readers return (images decoded, sequences ragged);
    :meth:`stored` and :meth:`decode` read the records TFDS wrote, for any selection of
    the features (a :class:`~tfr_hooks.tfrecord.schema.decoding.Decoding`).

    Attributes:
        parts: How each returned feature is stored and built, in the schema's order.
        labels: The names of each ``ClassLabel`` that has a ``labels.txt``.
    """

    parts: tuple[_Part, ...]
    labels: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)

    @property
    def schema(self) -> Schema:
        """The features returned, all of them, as a plain :class:`Schema`."""
        return Schema(part.feature for part in self.parts)

    def _parts_of(self, schema: Schema) -> list[_Part]:
        by_name = {part.feature.name: part for part in self.parts}
        return [by_name[name] for name in schema.names]

    def stored(self, schema: Schema) -> Schema:
        """The features TFDS stored for ``schema``'s features, under their flat keys."""
        return Schema(_stored_of(self._parts_of(schema)))

    def decode(self, schema: Schema, parsed: Mapping[str, Any]) -> dict[str, Any]:
        """``schema``'s features built from the batch parsed with :meth:`stored`."""
        return {part.feature.name: _build(part, parsed) for part in self._parts_of(schema)}


def _stored_of(parts: Sequence[_Part]) -> list[Feature]:
    """The features TFDS stored for ``parts``, under their flat keys."""
    return [_stored_feature(part, key) for part in parts for key in part.stored]


def _list_encoding(dtype: str) -> str:
    """The list TFDS stores values of ``dtype`` in: ``bytes``, ``int64`` or ``float``."""
    if dtype in ("string", "bytes"):
        return "bytes"
    return "float" if tf.as_dtype(dtype).is_floating else "int64"


def _stored_feature(part: _Part, key: str) -> Feature:
    feature = part.feature
    if part.how in ("image", "tensor_bytes"):
        return Feature(key, "bytes", (None,) if feature.sequence else (), "bytes")
    if part.how == "nested" and key.endswith("/ragged_row_lengths_0"):
        return Feature(key, "int64", (None,), "int64")
    encoding = _list_encoding(feature.dtype)
    if part.how == "plain":
        return Feature(key, feature.dtype, feature.shape, encoding)
    return Feature(key, feature.dtype, (None,), encoding)


def _build(part: _Part, parsed: Mapping[str, Any]) -> Any:
    """The returned feature of ``part`` from the parsed stored features."""
    feature = part.feature
    value = parsed[part.stored[0]]
    if part.how == "plain":
        return value
    if part.how == "tensor_bytes":
        if part.zlib:
            value = inflate(value)
        return feature.frame.decode(value)  # raw little-endian bytes, as tfds writes them
    if part.how == "image":
        if feature.sequence:
            frames = _decode_images(part, value.flat_values)
            return tf.RaggedTensor.from_row_splits(frames, value.row_splits, validate=False)
        return _decode_images(part, value)
    if part.how == "frames":
        size = max(1, feature.size or 1)
        flat = tf.reshape(value.flat_values, tf.constant([-1, *feature.shape], tf.int64))
        lengths = value.row_lengths() // size
        return tf.RaggedTensor.from_row_lengths(flat, lengths, validate=False)
    lengths = parsed[part.stored[1]]  # nested: [batch, (sequences)] of their lengths
    return tf.RaggedTensor.from_nested_row_lengths(
        value.flat_values, [lengths.row_lengths(), lengths.flat_values], validate=False
    )


def _decode_images(part: _Part, encoded: Any) -> Any:
    """``[n, *shape]`` images of the part's dtype from ``n`` encoded images."""
    feature = part.feature
    return decode_images(encoded, feature.shape, feature.dtype, part.image_format)


# --- the directory ------------------------------------------------------------------------


@dataclass(frozen=True)
class TfdsSplit:
    """One split of a TFDS directory: its shards and the examples in each."""

    name: str
    files: tuple[str, ...]
    counts: tuple[int, ...]

    @property
    def examples(self) -> int:
        """The examples of the split."""
        return sum(self.counts)


@dataclass(frozen=True)
class TfdsDir:
    """A TFDS prepared directory: its splits, features and supervised keys.

    Made by :func:`open_tfds_dir`.

    Attributes:
        path: The version directory.
        name: The data set's name.
        version: Its version.
        splits: The splits, in ``dataset_info.json``'s order.
        decoding: How its records become its features (:class:`TfdsDecoding`), with
            the names of its class labels.
        supervised_keys: The (input, target) feature names of ``supervisedKeys``, if any.
    """

    path: str
    name: str
    version: str
    splits: dict[str, TfdsSplit]
    decoding: TfdsDecoding
    supervised_keys: tuple[str, ...] | None = None
    file_format: str = field(default="tfrecord")

    @property
    def schema(self) -> Schema:
        """The features returned, all of them (images decoded, sequences ragged)."""
        return self.decoding.schema

    def split(self, split: str | None) -> TfdsSplit:
        """The split named ``split``; ``None`` for ``"train"`` when there is one."""
        if split is None:
            if "train" in self.splits:
                return self.splits["train"]
            raise ValueError(
                f"Expected `split` for TFDS directory {self.path!r}, which has no 'train' "
                f"split; its splits are {list(self.splits)}. Received: split=None"
            )
        if not isinstance(split, str):
            raise TypeError(f"Expected `split` to be a split name. Received: split={split!r}")
        if split in self.splits:
            return self.splits[split]
        if re.search(r"[\[\]+|]", split):
            raise ValueError(
                f"Expected `split` to name one split of {list(self.splits)}: TFDS split "
                f"slicing and merging ('train[:10%]', 'train+test') is not supported; "
                f"take examples with dataset.take(). Received: split={split!r}"
            )
        raise ValueError(
            f"Expected `split` to be one of the splits of TFDS directory {self.path!r}: "
            f"{list(self.splits)}. Received: split={split!r}"
        )

    def to_dict(self) -> dict[str, Any]:
        """The directory as a JSON-ready dict: splits, counts, features and label names."""
        features = []
        for feature in self.schema:
            item = feature.to_dict()
            if feature.name in self.decoding.labels:
                item["labels"] = list(self.decoding.labels[feature.name])
            features.append(item)
        return {
            "path": self.path,
            "tfds": {"name": self.name, "version": self.version, "file_format": self.file_format},
            "splits": {
                s.name: {"examples": s.examples, "shards": len(s.files)}
                for s in self.splits.values()
            },
            "supervised_keys": list(self.supervised_keys or []),
            "features": features,
        }

    def describe(self) -> str:
        """What ``tfr-hooks inspect DIR`` prints: the splits, their counts, the features."""
        lines = [self.path, f"  TensorFlow Datasets: {self.name} {self.version}"]
        kind = "ArrayRecord shard(s)" if self.file_format == "array_record" else "shard(s)"
        for split in self.splits.values():
            lines.append(
                f"  split {split.name}: {split.examples} examples in {len(split.files)} {kind}"
            )
        if self.supervised_keys:
            lines.append(f"  supervised keys (as_tuple=True): {', '.join(self.supervised_keys)}")
        lines.append("  features (as read, batch first):")
        width = max(len(f.name) for f in self.schema)
        for feature in self.schema:
            dims = ["batch", *(["None"] if feature.sequence else []), *map(str, feature.shape)]
            text = f"{feature.dtype} [{', '.join(dims)}]"
            labels = self.decoding.labels.get(feature.name)
            if labels:
                shown = ", ".join(labels[:10]) + (", ..." if len(labels) > 10 else "")
                text += f"  labels ({len(labels)}): {shown}"
            lines.append(f"    {feature.name.ljust(width)}  {text}")
        return "\n".join(lines)

    def plan_parts(self, split: str | None, as_tuple: object) -> tuple[TfdsSplit, object]:
        """The split to read and ``as_tuple`` with ``True`` as the supervised keys."""
        chosen = self.split(split)
        if as_tuple is True:
            if self.supervised_keys is None:
                raise ValueError(
                    f"Expected `as_tuple=True` only for a TFDS directory with supervised "
                    f"keys; {self.path!r} has none. Name the features instead, e.g. "
                    f"as_tuple={tuple(self.schema.names[:2])!r}. Received: as_tuple=True"
                )
            as_tuple = self.supervised_keys
        return chosen, as_tuple

    def check_files(self, split: TfdsSplit) -> str:
        """Check the split's shards exist and start with a record; their compression."""
        codecs = set()
        stored = self.decoding.stored(self.schema)
        for path, listed in zip(split.files, split.counts, strict=True):
            if not tf.io.gfile.exists(path):
                raise NoFilesError(
                    f"TFDS shard {path!r} of split {split.name!r} is missing: "
                    f"{os.path.join(self.path, INFO_FILENAME)!r} lists "
                    f"{len(split.files)} shards for it.",
                    file=path,
                )
            if self.file_format == "array_record":  # counted as listed, read by index
                shard = ArrayRecordFiles([path])
                if len(shard) != listed:
                    raise CorruptRecordError(
                        f"Expected TFDS shard {path!r} to hold the {listed} records its "
                        f"{INFO_FILENAME} lists. Received: {len(shard)} records",
                        file=path,
                    )
                first = shard.read([0])[0] if listed else None
            else:
                codec = detect_compression(path)
                codecs.add(codec)
                check_framing(path, codec)
                first = first_record(path, codec)
            if first is not None:
                stored.check_example(first, file=path, record=0, warn=False)
        if len(codecs) > 1:
            raise ValueError(f"Expected one compression for the shards of split {split.name!r}.")
        return codecs.pop() if codecs else ""


def open_tfds_dir(path: Any) -> TfdsDir | None:
    """The TFDS directory ``path`` names, or ``None`` if it is not one.

    Args:
        path: A version directory ``<data_dir>/<name>/<version>/``, or a dataset
            directory ``<data_dir>/<name>/`` holding exactly one version.

    Returns:
        The :class:`TfdsDir`, or ``None`` for anything else (files, globs, lists,
        other directories).

    Raises:
        ValueError: If ``path`` holds several versions, its ``fileFormat`` is neither
            ``tfrecord`` nor ``array_record``, or a feature's kind cannot be read.
    """
    if not isinstance(path, (str, os.PathLike)):
        return None
    path = os.fspath(path)
    if not tf.io.gfile.isdir(path):
        return None
    directory = _version_dir(path)
    if directory is None:
        return None
    info = _load_json(directory, INFO_FILENAME)
    features = _load_json(directory, FEATURES_FILENAME)
    file_format = str(info.get("fileFormat") or "tfrecord").lower()
    if file_format not in ("tfrecord", "array_record"):
        raise ValueError(
            f"Expected TFDS directory {directory!r} to hold TFRecord or ArrayRecord shards; "
            f"its dataset_info.json says fileFormat {file_format!r}, which the package "
            f"cannot read. Prepare it with file_format='tfrecord' or 'array_record'. "
            f"Received: fileFormat={file_format!r}"
        )
    mapper = _Mapper(directory)
    mapper.walk(features, "", 0)
    name = str(info.get("name", os.path.basename(os.path.dirname(directory))))
    splits = {
        str(s["name"]): _split(directory, name, file_format, s) for s in info.get("splits", [])
    }
    return TfdsDir(
        path=directory,
        name=name,
        version=str(info.get("version", os.path.basename(directory))),
        splits=splits,
        decoding=TfdsDecoding(tuple(mapper.parts), mapper.labels),
        supervised_keys=_supervised_keys(info.get("supervisedKeys")),
        file_format=file_format,
    )


def _load_json(directory: str, filename: str) -> dict[str, Any]:
    """The JSON object of ``filename`` in ``directory``; an error naming the file if not one."""
    path = os.path.join(directory, filename)
    with tf.io.gfile.GFile(path) as handle:
        text = handle.read()
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"Expected {path!r} to be the JSON object TensorFlow Datasets writes ({filename} "
            f"of a prepared directory); it is not valid JSON: {error.msg} at line "
            f"{error.lineno}, column {error.colno}. Prepare the data set again, or restore "
            f"the file. Received: {filename}={_excerpt(text)!r}"
        ) from error
    if not isinstance(loaded, dict):
        raise ValueError(
            f"Expected {path!r} to hold a JSON object, as TensorFlow Datasets writes "
            f"{filename}. Received: {filename}={_excerpt(text)!r}"
        )
    return loaded


def _excerpt(text: str, limit: int = 60) -> str:
    """The start of ``text``, cut to ``limit`` characters."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def _split(directory: str, name: str, file_format: str, info: Mapping[str, Any]) -> TfdsSplit:
    counts = tuple(int(n) for n in info.get("shardLengths", []))
    template = str(info.get("filepathTemplate") or _DEFAULT_TEMPLATE)
    total = len(counts)
    files = tuple(
        os.path.join(
            directory,
            template.replace("{DATASET}", name)
            .replace("{SPLIT}", str(info["name"]))
            .replace("{FILEFORMAT}", file_format)
            .replace("{SHARD_X_OF_Y}", f"{i:05d}-of-{total:05d}")
            .replace("{SHARD_INDEX}", f"{i:05d}")
            .replace("{NUM_SHARDS}", f"{total:05d}"),
        )
        for i in range(total)
    )
    return TfdsSplit(str(info["name"]), files, counts)


def _supervised_keys(info: Any) -> tuple[str, ...] | None:
    """``supervisedKeys`` of ``dataset_info.json``: a tuple of feature keys, or the old form."""
    if not info:
        return None
    if "tuple" in info:
        items = info["tuple"].get("items", [])
        keys = tuple(item.get("featureKey") for item in items)
        return keys if keys and all(isinstance(k, str) for k in keys) else None
    if "input" in info and "output" in info:
        return (str(info["input"]), str(info["output"]))
    return None


class TfdsSource(RecordSource):
    """A split of a TFDS prepared directory: its shards, exact counts and features.

    Made by the dispatcher for a version directory (or a dataset directory of one
    version), alone or as a list of one; ``split`` names the split (``None``:
    ``"train"``). Its features are decoded as ``features.json`` declares: a reader's
    ``schema`` and ``decode`` are refused.

    One prepared with ``file_format="array_record"`` is listed, counted and checked alike
    (its records read by index with ``ArrayRecordFiles``); the ``tf.data`` readers read its
    shards through their record format (:mod:`~tfr_hooks.tfrecord.formats.arrayrecord`).

    Attributes:
        record_format: ``"tfrecord"`` or ``"array_record"``: how the shards frame records.
    """

    takes_split = True
    declares_schema = True

    def __init__(self, found: TfdsDir, split: str | None) -> None:
        self.directory = found
        self.split = found.split(split)
        self.files = list(self.split.files)
        self.record_format = found.file_format

    @classmethod
    def open(
        cls, files: Any, split: str | None, paths: Callable[[], list[str]]
    ) -> RecordSource | None:
        """The source of the TFDS directory ``files`` names, else ``None``."""
        del paths
        one = files[0] if isinstance(files, (list, tuple)) and len(files) == 1 else files
        found = open_tfds_dir(one)
        return None if found is None else cls(found, split)

    @classmethod
    def list_directory(cls, directory: str) -> list[str] | None:
        """The shards of a TFDS version directory: neither its JSON nor its label names."""
        if not is_tfds_dir(directory):
            return None
        names = sorted(
            name
            for name in tf.io.gfile.listdir(directory)
            if not name.startswith((".", "_"))
            and not name.endswith((".json", ".labels.txt"))
            and not tf.io.gfile.isdir(os.path.join(directory, name))
        )
        return [os.path.join(directory, name) for name in names]

    def counts(self) -> list[int | None]:
        """The examples of each shard, from ``dataset_info.json``."""
        return list(self.split.counts)

    def names(self, as_tuple: object) -> object:
        """``as_tuple``, with ``True`` for the supervised keys."""
        return self.directory.plan_parts(self.split.name, as_tuple)[1]

    def compression(self, given: str | None, *, tolerant: bool) -> str:
        """The shards' one compression; ``given`` must match it."""
        del tolerant
        codec = self.directory.check_files(self.split)
        if given is not None and given.upper().replace("NONE", "") != codec:
            raise ValueError(
                f"Expected `compression` to match the shards of TFDS directory "
                f"{self.directory.path!r} ({codec or 'none'}), or None. "
                f"Received: compression={given!r}"
            )
        return codec

    def schema(
        self, given: SchemaLike, decode: Mapping[str, Any] | None, compression: str
    ) -> Schema:
        """The features of ``features.json`` (see :meth:`decoding`); no ``schema``, ``decode``."""
        del compression
        if given is not None:
            raise ValueError(
                f"Expected no `schema` for TFDS directory {self.directory.path!r}: its "
                "features.json declares the features (pass its shard files to read them "
                f"with a schema of your own). Received: schema={given!r}"
            )
        if decode:
            raise ValueError(
                "Expected no `decode` for a TFDS directory: its features.json declares how "
                "each feature is decoded; decode further in map_fn. "
                f"Received: decode={dict(decode)!r}"
            )
        return self.directory.schema

    def decoding(self) -> TfdsDecoding:
        """How the split's records become the features of :meth:`schema`."""
        return self.directory.decoding

    def check(self, schema: Schema, compression: str, *, given: bool) -> Checked:
        """The shards were checked with the compression; the counts, or the whole records."""
        del compression, given
        if self.damage is not None:
            return schema, [self.damage.of(path).records for path in self.files], 1
        return schema, self.counts(), 1

    def to_dict(self) -> dict[str, Any] | None:
        """The directory's splits, counts, features and label names."""
        return self.directory.to_dict()

    def describe(self) -> str | None:
        """The directory's splits, counts, features and label names, as lines."""
        return self.directory.describe()
