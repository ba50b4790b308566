"""tfr_hooks.tfrecord.formats.index: the record index, built once, kept, keyed, locked, checked."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf

from tfr_hooks import tf_private
from tfr_hooks.tfrecord import CorruptRecordError
from tfr_hooks.tfrecord.formats import index as ix


def write(path: Path, sizes: list[int], options: str | None = None) -> list[bytes]:
    records = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    with tf.io.TFRecordWriter(str(path), options=options) as writer:
        for record in records:
            writer.write(record)
    return records


@pytest.fixture(autouse=True)
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test writes to the user's cache: $XDG_CACHE_HOME is a temporary directory."""
    monkeypatch.delenv(ix.INDEX_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_block_offsets_enter_the_file_at_each_block(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    records = write(path, [(i * 37) % 300 for i in range(1000)])
    index = ix.build_index(str(path))
    assert (index.count, index.block, index.blocks) == (1000, 128, 8)
    assert len(index.bounds) == index.blocks + 1 and index.bounds[-1] == path.stat().st_size
    for block in range(index.blocks):
        read = tf_private.records_from_offset(str(path), int(index.bounds[block]), 1 << 16)
        assert next(iter(read)).numpy() == records[block * index.block]
    assert index.offset(300) == (int(index.bounds[2]), 300 - 256)
    with pytest.raises(ValueError, match=r"Received: record=1000"):
        index.offset(1000)


def test_an_index_is_one_offset_a_block_not_one_a_record(tmp_path: Path) -> None:
    path = tmp_path / "many.tfrecord"
    write(path, [1] * 20_000)
    index = ix.record_index(str(path))
    stored = os.path.getsize(str(path) + ix.INDEX_SUFFIX)
    assert index.blocks == 157
    assert stored < 8 * 160 + 512  # 8 bytes a block and a header; 16 a record would be 320 kB


def test_stored_beside_the_file_and_reused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "a.tfrecord"
    write(path, [10] * 300)
    with caplog.at_level(logging.INFO, logger=ix.__name__):
        first = ix.record_index(str(path))
        stored = Path(str(path) + ix.INDEX_SUFFIX)
        assert stored.exists()
        written = stored.stat()
        assert [r.getMessage() for r in caplog.records if "indexed" in r.getMessage()]
        caplog.clear()
        again = ix.record_index(str(path))
    assert again.same(first)
    # read, not rebuilt: no build logged, and the same file (a rebuild replaces the file
    # by a new one, so its inode changes; a time stamp may not, within its resolution)
    assert not [r.getMessage() for r in caplog.records if "indexed" in r.getMessage()]
    now = stored.stat()
    assert (now.st_ino, now.st_size) == (written.st_ino, written.st_size)
    assert ix.load_index(str(path)) is not None
    ix.record_index(str(path), rebuild=True)  # what the check above tells apart
    assert stored.stat().st_ino != written.st_ino


def test_a_changed_file_is_indexed_again(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    write(path, [10] * 300)
    assert ix.record_index(str(path)).count == 300
    write(path, [10] * 301)
    assert ix.load_index(str(path)) is None  # the stored one is of another version
    assert ix.record_index(str(path)).count == 301
    # same size and a restored mtime: the hash of the file's ends still tells
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # another content, same size
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns
    assert ix.load_index(str(path)) is None


def test_read_only_directory_uses_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_home: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = data / "a.tfrecord"
    write(path, [10] * 200)
    real_access = os.access
    monkeypatch.setattr(  # root may write anywhere: the check a read-only mount fails
        os, "access", lambda p, mode: False if str(p) == str(data) else real_access(p, mode)
    )
    places, target = ix.index_locations(str(path))
    assert places[0] == str(path) + ix.INDEX_SUFFIX
    assert target.startswith(str(cache_home / "tfr_hooks" / "index"))
    assert ix.record_index(str(path)).count == 200
    assert os.path.exists(target) and not os.path.exists(places[0])


def test_the_index_directory_variable_holds_every_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "a.tfrecord"
    write(path, [10] * 200)
    monkeypatch.setenv(ix.INDEX_DIR_ENV, str(tmp_path / "indexes"))
    ix.record_index(str(path))
    assert not os.path.exists(str(path) + ix.INDEX_SUFFIX)
    assert [n for n in os.listdir(tmp_path / "indexes") if n.endswith(ix.INDEX_SUFFIX)]


def test_a_damaged_index_file_is_built_again(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    write(path, [10] * 300)
    ix.record_index(str(path))
    stored = Path(str(path) + ix.INDEX_SUFFIX)
    stored.write_bytes(stored.read_bytes()[:-8])  # cut short
    with pytest.raises(ValueError, match="Received: target="):
        ix.read_index_file(str(stored), str(path))
    assert ix.record_index(str(path)).count == 300
    ix.read_index_file(str(stored), str(path))  # whole again


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_compressed_files_get_a_count_and_file_granularity(
    tmp_path: Path, compression: str
) -> None:
    path = tmp_path / "a.tfrecord.gz"
    write(path, [10] * 300, options=compression)
    index = ix.record_index(str(path), compression)
    assert (index.count, index.seekable, len(index.bounds)) == (300, False, 0)
    with pytest.raises(ValueError, match=f"{compression} files can only be read from their start"):
        index.offset(5)
    assert ix.load_index(str(path), compression).count == 300


def test_a_damaged_file_names_the_file_and_record(tmp_path: Path) -> None:
    path = tmp_path / "bad.tfrecord"
    write(path, [20] * 50)
    data = bytearray(path.read_bytes())
    data[7 * 36 + 12 + 3] ^= 0xFF  # a byte of record 7's data
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError, match=r"bad\.tfrecord: record 7 is damaged") as caught:
        ix.record_index(str(path))
    assert caught.value.file == str(path) and caught.value.record == 7
    assert not os.path.exists(str(path) + ix.INDEX_SUFFIX)


def test_a_truncated_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.tfrecord"
    write(path, [20] * 50)
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(CorruptRecordError, match=r"cut\.tfrecord"):
        ix.build_index(str(path))


_BUILD = """
import hashlib, logging, sys
logging.basicConfig(level=logging.INFO, format="%(message)s")
from tfr_hooks.tfrecord.formats.index import record_index
index = record_index(sys.argv[1])
print(index.count, hashlib.sha256(index.bounds.tobytes()).hexdigest(), flush=True)
"""


@pytest.mark.slow
def test_concurrent_builds_in_processes_give_one_valid_index(tmp_path: Path) -> None:
    """Four processes build the same index at once: one builds, the others wait for its
    index and read it; one valid index, the same for all, no temporary file left."""
    path = tmp_path / "big.tfrecord"
    write(path, [(i * 13) % 200 for i in range(150_000)])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "TF_CPP_MIN_LOG_LEVEL": "2"}
    gate = tmp_path / "go"
    script = (
        f"import os, time\nopen(os.path.join({str(tmp_path)!r}, f'ready-{{os.getpid()}}'), 'w')\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.005)\n"
    )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", "import tensorflow\n" + script + _BUILD, str(path)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        deadline = time.monotonic() + 600
        while len(list(tmp_path.glob("ready-*"))) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        gate.touch()  # the processes wait with TensorFlow imported, then build at once
        outputs = [worker.communicate(timeout=600) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait(timeout=60)
    assert [w.returncode for w in workers] == [0] * 4, [err[-2000:] for _, err in outputs]
    builds = sum(err.count("indexed ") for _, err in outputs)
    assert builds == 1, [err[-2000:] for _, err in outputs]  # the others waited, then read it
    lines = {out.strip() for out, _ in outputs}
    assert len(lines) == 1, lines
    stored = ix.read_index_file(str(path) + ix.INDEX_SUFFIX, str(path))
    expected = ix.build_index(str(path))
    assert stored.same(expected) and lines.pop().split()[0] == "150000"
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith(".tfrindex-")]
    assert leftovers == []


def test_index_files_checks_one_compression_a_file(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    write(path, [10] * 10)
    with pytest.raises(ValueError, match=r"Received: compression=\['', ''\]"):
        ix.index_files([str(path)], ["", ""])
    ix.index_files([str(path)])
    data = Path(str(path) + ix.INDEX_SUFFIX).read_bytes()
    header = json.loads(data[12 : 12 + int.from_bytes(data[8:12], "little")])
    assert (header["count"], header["block"], header["size"]) == (10, 128, path.stat().st_size)


def test_the_index_command_builds_ahead_of_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tfr_hooks import cli

    write(tmp_path / "a.tfrecord", [10] * 300)
    write(tmp_path / "b.tfrecord.gz", [10] * 5, options="GZIP")
    assert cli.main(["index", str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord.gz")]) == 0
    out = capsys.readouterr().out
    assert "a.tfrecord: 300 records, 3 blocks" in out
    assert "b.tfrecord.gz: 5 records, GZIP: a count only" in out
    assert ix.load_index(str(tmp_path / "a.tfrecord")).count == 300
    (tmp_path / "c.tfrecord").write_bytes(b"not a record file at all")
    assert cli.main(["index", str(tmp_path / "c.tfrecord")]) == 1
    assert "tfr-hooks index: error:" in capsys.readouterr().err
