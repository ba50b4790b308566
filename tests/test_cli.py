"""The ``tfr-hooks`` command: convert an .npz, inspect files, report errors."""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _tfrecord_data import bytes_feature, example, float_feature, int64_feature, write_records
from tfr_hooks import cli, tfrecord

SRC = Path(cli.__file__).resolve().parents[2]
# the checkout's examples, also when tox runs the tests against the installed wheel
EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("[a-z]*.py"))


@pytest.fixture
def npz(tmp_path):
    path = tmp_path / "mnist.npz"
    np.savez(
        path,
        image=np.arange(30 * 2 * 3, dtype=np.uint8).reshape(30, 2, 3),
        label=np.arange(30) % 10,
    )
    return path


def test_convert_writes_shards_and_prints_the_schema(tmp_path, npz, capsys):
    out = tmp_path / "out"
    status = cli.main(
        [
            "convert",
            str(npz),
            str(out),
            "--shards",
            "3",
            "--compression",
            "gzip",
            "--no-progress",
        ]
    )
    captured = capsys.readouterr()
    assert status == 0
    assert captured.out.splitlines() == [
        f"Wrote 30 examples to 3 shard(s) in {out} (compression: GZIP)",
        f"Schema: {out / 'schema.json'}",
        "  feature  dtype  shape   encoding",
        "  image    uint8  (2, 3)  raw",
        "  label    int64  ()      int64",
    ]
    assert captured.err == ""
    assert sorted(p.name for p in out.iterdir()) == [
        "data-00000-of-00003.tfrecord.gz",
        "data-00001-of-00003.tfrecord.gz",
        "data-00002-of-00003.tfrecord.gz",
        "schema.json",
    ]
    labels = np.concatenate([b["label"].numpy() for b in tfrecord.dataset(out, 7)])
    assert sorted(labels.tolist()) == sorted((np.arange(30) % 10).tolist())


def test_convert_shows_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, npz, capsys):
    # a log file or a pipe would keep every redraw of the bar, and a bar left at 0%
    assert cli.main(["convert", str(npz), str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out.startswith("Wrote 30 examples")


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
@pytest.mark.slow  # the command in a terminal: a process that imports TensorFlow; about 15 s of CPU
def test_convert_progress_bar_on_a_terminal_ends_at_the_final_count(tmp_path):
    import fcntl
    import pty
    import struct
    import termios

    path = tmp_path / "big.npz"
    np.savez(path, x=np.zeros((1000, 3), np.float32), y=np.arange(1000))
    leader, follower = pty.openpty()
    # 24 rows of 100 columns: a new pseudo-terminal has none, and tqdm would draw no bar
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfr_hooks.cli", "convert", str(path), str(tmp_path / "out")],
            stdout=subprocess.PIPE,
            stderr=follower,
            env=env,
        )
        os.close(follower)
        terminal = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the pseudo-terminal closes with the process (EIO)
                break
            if not chunk:
                break
            terminal += chunk
        out, _ = proc.communicate(timeout=180)
    finally:
        os.close(leader)
    assert proc.returncode == 0, terminal.decode(errors="replace")
    assert out.decode().startswith("Wrote 1000 examples")
    last = terminal.decode(errors="replace").replace("\r\n", "\n").split("\r")[-1]
    # the bar stays on screen, at the final count
    assert "writing: 100%" in last and "1000/1000" in last, repr(terminal[-300:])


def test_convert_into_an_existing_dataset_names_the_overwrite_flag(tmp_path, npz, capsys):
    out = tmp_path / "out"
    assert cli.main(["convert", str(npz), str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert cli.main(["convert", str(npz), str(out), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "tfr-hooks convert: error: Expected OUTDIR to hold no dataset. Received: "
        f"OUTDIR={str(out)!r}, which holds 'schema.json' and 1 more file(s). "
        "Pass --overwrite to replace it.\n"
    )
    assert cli.main(["convert", str(npz), str(out), "--no-progress", "--overwrite"]) == 0


def test_inspect_prints_a_table(tmp_path, npz, capsys):
    out = tmp_path / "out"
    cli.main(["convert", str(npz), str(out), "--shards", "2", "--no-progress"])
    capsys.readouterr()

    assert cli.main(["inspect", str(out / "data-00000-of-00002.tfrecord")]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(out / "data-00000-of-00002.tfrecord")
    assert lines[1].startswith("  records: 15   compression: none   size: ")
    assert lines[2:] == [
        "  schema: stored in schema.json",
        "  feature  kind   length  bytes  dtype  shape   in records",
        "  image    bytes  1       6      uint8  (2, 3)  15/15",
        "  label    int64  1              int64  ()      15/15",
    ]


def test_inspect_infers_the_schema_of_a_foreign_file(tmp_path, capsys):
    records = [
        example(label=int64_feature([i]), xy=float_feature([i, -i]), tags=int64_feature(range(i)))
        for i in range(4)
    ]
    path = write_records(tmp_path / "foreign.rec", records, "ZLIB")

    assert cli.main(["inspect", path]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[1].startswith("  records: 4   compression: ZLIB   size: ")
    assert lines[2:] == [
        "  schema: inferred",
        "  feature  kind   length  bytes  dtype    shape      in records",
        "  label    int64  1              int64    ()         4/4",
        "  tags     int64  0..3           int64    (varying)  4/4",
        "  xy       float  2              float32  (2,)       4/4",
    ]


def test_inspect_json(tmp_path, npz, capsys):
    out = tmp_path / "out"
    cli.main(["convert", str(npz), str(out), "--shards", "2", "--no-progress"])
    capsys.readouterr()

    assert cli.main(["inspect", str(out), "--json"]) == 0

    data = json.loads(capsys.readouterr().out)
    assert [item["num_records"] for item in data] == [15, 15]
    assert data[0]["compression"] == "none"
    assert [f["name"] for f in data[0]["features"]] == ["image", "label"]
    assert data[0]["features"][0]["min_bytes"] == 6
    assert data[0]["stored_schema"][0] == {
        "name": "image",
        "dtype": "uint8",
        "shape": [2, 3],
        "encoding": "raw",
    }


def test_inspect_reports_bad_files_and_keeps_going(tmp_path, capsys):
    good = write_records(tmp_path / "good.rec", [example(label=int64_feature([1]))])
    bad = tmp_path / "notes.txt"
    bad.write_text("not a tfrecord\n" * 5)

    assert cli.main(["inspect", good, str(bad)]) == 1

    captured = capsys.readouterr()
    assert "  label    int64  1" in captured.out
    assert "Total: 1 records in 1 readable file(s) of 2" in captured.out
    # the error is printed once, on stderr
    assert str(bad) not in captured.out and "error" not in captured.out
    assert len(captured.err.splitlines()) == 1
    assert captured.err.startswith(f"tfr-hooks inspect: error: File '{bad}' is not a TFRecord")


def test_inspect_of_one_bad_file_prints_its_error_once_on_stderr(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("not a tfrecord\n" * 5)
    assert cli.main(["inspect", str(bad)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("is not a TFRecord file") == 1
    assert captured.err.startswith(f"tfr-hooks inspect: error: File '{bad}' is not a TFRecord")


def test_the_top_level_help_describes_the_commands_there_are(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    parser = cli.build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(commands.choices) == ["convert", "data-service", "index", "inspect", "measure"]
    description = parser.description or ""
    assert "check" not in description  # there is no check command
    assert all(name in description.lower() for name in commands.choices), description


def test_inspect_without_matching_files(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path / "*.tfrecord")]) == 1
    assert capsys.readouterr().err == (
        f"tfr-hooks inspect: error: No files match the pattern '{tmp_path / '*.tfrecord'}'.\n"
    )


def test_convert_reports_a_missing_input(tmp_path, capsys):
    assert cli.main(["convert", str(tmp_path / "no.npz"), str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == (
        "tfr-hooks convert: error: Expected `input` to be an existing .npz file. "
        f"Received: input='{tmp_path / 'no.npz'}'\n"
    )


def test_convert_reports_arrays_of_different_lengths(tmp_path, capsys):
    path = tmp_path / "bad.npz"
    np.savez(path, x=np.zeros((4, 2)), y=np.zeros(3))
    assert cli.main(["convert", str(path), str(tmp_path / "out")]) == 1
    assert "same length" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [[], ["convert", "a.npz"], ["inspect"], ["convert", "a.npz", "out", "--shards", "0"]],
)
def test_usage_errors_exit_with_status_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert "usage: tfr-hooks" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["tfr_hooks.cli", "tfr_hooks.cli.common", *cli.COMMANDS])
def test_cli_module_imports_only_the_standard_library(name):
    module = importlib.import_module(name)
    tree = ast.parse(Path(module.__file__).read_text())
    top_level = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            top_level.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not (node.module or "").startswith(
            "tfr_hooks.cli"
        ):
            top_level.add((node.module or "").split(".")[0])
    assert top_level - {"__future__"} <= set(sys.stdlib_module_names)


@pytest.mark.slow
def test_python_dash_m_inspect(tmp_path):
    path = write_records(tmp_path / "one.rec", [example(label=int64_feature([7]))] * 3)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    result = subprocess.run(
        [sys.executable, "-m", "tfr_hooks.cli", "inspect", path],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == path
    assert "  records: 3   compression: none" in result.stdout
    assert "  label    int64  1" in result.stdout
    # TensorFlow's start-up notices do not bury the command's output
    assert "oneDNN" not in result.stderr
    assert "cuda" not in result.stderr.lower()


def test_inspect_says_optional_for_a_feature_of_0_or_1_values(tmp_path, capsys):
    # as TFX writes them: an empty list, or the key absent, where a value is missing
    records = [
        example(trip=int64_feature([i]), seconds=float_feature([i] if i % 2 else []))
        for i in range(4)
    ]
    records.append(example(trip=int64_feature([4])))
    path = write_records(tmp_path / "taxi.gz", records, "GZIP")

    assert cli.main(["inspect", path]) == 0

    lines = capsys.readouterr().out.splitlines()
    assert lines[2:] == [
        "  schema: inferred",
        "  feature  kind   length  bytes  dtype    shape     in records",
        "  seconds  float  0..1           float32  optional  4/5",
        "  trip     int64  1              int64    ()        5/5",
    ]
    assert cli.main(["inspect", path, "--json"]) == 0
    (item,) = json.loads(capsys.readouterr().out)
    assert [(f["name"], f["optional"]) for f in item["features"]] == [
        ("seconds", True),
        ("trip", False),
    ]


def test_inspect_shows_a_feature_lacking_in_record_0_as_in_record_30(tmp_path, capsys):
    # issue 17 item 4: which record lacks the feature changes neither inspect nor reading
    tables = []
    for missing in (0, 30):
        records = [
            example(id=int64_feature([i]), **({} if i == missing else {"t": float_feature([i])}))
            for i in range(50)
        ]
        path = write_records(tmp_path / f"lacks-{missing}.tfrecord", records)
        assert cli.main(["inspect", path]) == 0
        tables.append(capsys.readouterr().out.splitlines()[1:])
        (batch,) = tfrecord.dataset(path, 50)
        assert batch["t"].row_lengths().numpy().tolist() == [int(i != missing) for i in range(50)]
    assert tables[0] == tables[1]
    assert tables[0][-1] == "  t        float  1              float32  optional  49/50"


def _undescribed(parser: argparse.ArgumentParser) -> list[str]:
    """The flags and arguments of ``parser`` and its subcommands without a help string."""
    missing = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                missing += [f"{name} {flag}" for flag in _undescribed(sub)]
        elif not (action.help or "").strip():
            missing.append("/".join(action.option_strings) or action.dest)
    return missing


def test_every_cli_flag_has_a_help_string():
    assert _undescribed(cli.build_parser()) == []


class _Parsed(Exception):
    """Raised instead of parsing: carries the parser an example built."""


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_example_flag_has_a_help_string(script, monkeypatch):
    def keep(parser, *args, **kwargs):
        raise _Parsed(parser)

    spec = importlib.util.spec_from_file_location(f"_example_{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", keep)  # stops main there
    with pytest.raises(_Parsed) as parsed:
        module.main([])
    parser = parsed.value.args[0]
    assert [a for a in parser._actions if a.option_strings != ["-h", "--help"]]
    assert _undescribed(parser) == [], f"{script.name} --help"


@pytest.mark.slow  # converts and reads back; about 1 s of CPU
def test_convert_tfrecord_files_of_another_tool_end_to_end(tmp_path, capsys):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(30, 4, 4, 1), dtype=np.uint8)
    records = [
        example(image_raw=bytes_feature([image.tobytes()]), label=int64_feature([i % 10]))
        for i, image in enumerate(images)
    ]
    source = tmp_path / "in"
    source.mkdir()
    write_records(source / "train-0.tfrecords", records[:20])
    write_records(source / "train-1.tfrecords.gz", records[20:], "GZIP")
    out = tmp_path / "out"
    argv = ["convert", str(source / "train-*"), str(out), "--decode", "image_raw=uint8:4,4,1"]
    argv += ["--shards", "2", "--examples-per-record", "4", "--compression", "gzip"]
    assert cli.main([*argv, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "Wrote 30 examples to 2 shard(s)" in printed
    assert "Packed: 4 examples per record" in printed
    assert "image_raw  uint8  (4, 4, 1)" in printed
    batches = list(
        tfrecord.dataset(
            str(out), batch_size=30, read_config=tfrecord.ReadConfig(num_parallel_reads=1)
        )
    )
    np.testing.assert_array_equal(batches[0]["image_raw"].numpy(), images)
    np.testing.assert_array_equal(batches[0]["label"].numpy(), np.arange(30) % 10)


@pytest.mark.slow  # a packed conversion from the command: about 1.2 s of CPU
def test_convert_packs_a_varying_feature_from_the_command_line(tmp_path, capsys):
    records = [example(tokens=int64_feature(range(i % 3))) for i in range(9)]
    path = write_records(tmp_path / "text.tfrecord", records)
    argv = ["convert", path, str(tmp_path / "out"), "--examples-per-record", "3"]
    assert cli.main([*argv, "--no-progress"]) == 0
    assert "Packed: 3 examples per record" in capsys.readouterr().out
    rows = [r for b in tfrecord.dataset(str(tmp_path / "out"), 4) for r in b["tokens"].to_list()]
    assert rows == [list(range(i % 3)) for i in range(9)]


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "in.tfrecord", "out", "--decode", "image_raw"],
        ["convert", "in.tfrecord", "out", "--decode", "image_raw=uint8:28,x"],
        ["convert", "a.npz", "b.tfrecord", "out"],
        ["convert", "a.npz", "out", "--decode", "x=uint8:2"],
    ],
)
def test_convert_usage_errors_of_tfrecord_input(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    assert "tfr-hooks: error:" in capsys.readouterr().err
