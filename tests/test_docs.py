"""README.md, CONTRIBUTING.md and docs/*.md say what the code does: blocks run, commands exist.

- Every ``python`` block runs, in order, as written, one fresh process per document
  (``tests/_docs_child.py`` writes the data the blocks read and defines the names that
  stand for the reader's own code). A block that cannot run here carries a visible
  ``<!-- skip: next "reason" -->`` comment in the source (Sybil's skip directive).
- Every command of a ``console``/``bash`` block names a subcommand and flags that the
  command's real ``--help`` lists (``tfr-hooks``, the example and benchmark scripts,
  ``tox -e`` environments of tox.ini, ``tensorboard``).
- A signature written out in a ``text`` block matches the code's.

The blocks are found with Sybil (https://github.com/simplistic/sybil), which parses
Markdown fences and HTML-comment directives and runs the blocks of a document in one
namespace. It was chosen over pytest-markdown-docs for that shared namespace across blocks,
for its skip directive with a stated reason, and because it runs under an ordinary test
function: each document can go to a fresh process, which the blocks that configure
TensorFlow's runtime need.
"""

from __future__ import annotations

import ast
import configparser
import contextlib
import inspect
import io
import itertools
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tfr_hooks
from _cluster import ROOT, run_cluster

DOCUMENTS = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks(document: Path, *languages: str) -> list[tuple[int, str]]:
    """The ``(line, text)`` of each fenced block in one of ``languages``."""
    text = document.read_text()
    found = []
    for match in FENCE.finditer(text):
        if match.group(1) in languages:
            found.append((text.count("\n", 0, match.start()) + 1, match.group(2)))
    return found


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    "document",
    [
        # its blocks start real tf.data service servers: run where the service tests run
        pytest.param(doc, marks=pytest.mark.data_service) if doc.name == "data_service.md" else doc
        for doc in DOCUMENTS
    ],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_every_python_block_runs(document: Path, tmp_path: Path) -> None:
    lines = [line for line, _ in blocks(document, "python")]
    if not lines:  # nothing to run (CONTRIBUTING.md, the API pages): no process to start
        return
    (worker,) = run_cluster(
        [str(ROOT / "tests" / "_docs_child.py"), str(document), str(tmp_path / "work")],
        0,
        timeout=360,
    )
    assert worker.returncode == 0, worker.stderr[-6000:]
    result = worker.result()
    # every block was either run or skipped with its reason: none went unnoticed
    assert sorted(result["ran"] + [line for line, _ in result["skipped"]]) == lines
    assert len(result["skipped"]) <= 1, result["skipped"]


def commands(block: str) -> list[list[str]]:
    """The commands of a console block, each as argv without its environment assignments."""
    lines = block.splitlines()
    if any(line.startswith("$ ") for line in lines):  # a prompt marks commands, the rest is output
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    found = []
    pending = ""
    for line in text.splitlines():
        pending += ("\n" if pending else "") + line
        try:  # a quoted argument may run over several lines
            words = shlex.split(pending, comments=True)
        except ValueError:
            continue
        pending = ""
        for is_and, group in itertools.groupby(words, lambda w: w in ("&&", "||", ";")):
            argv = list(group)
            if is_and:
                continue
            while argv and re.match(r"^\w+=", argv[0]):  # VAR=value before the command
                argv.pop(0)
            if argv:
                found.append(argv)
    assert not pending, f"an unclosed quotation in {block!r}"
    return found


def tox_environments() -> set[str]:
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini")
    names = {s.split(":", 1)[1] for s in config.sections() if s.startswith("testenv:")}
    for entry in re.split(r",(?![^{]*\})", config["tox"]["env_list"]):
        entry = entry.strip()
        match = re.match(r"^(.*)\{([^}]*)\}(.*)$", entry)
        options = match.group(2).split(",") if match else [""]
        names.update(f"{match.group(1)}{o}{match.group(3)}" if match else entry for o in options)
    return names


_HELP: dict[tuple[str, ...], str] = {}


def help_text(argv: tuple[str, ...]) -> str:
    """What ``argv --help`` prints, run for real (scripts in a fork of the test process)."""
    if argv not in _HELP:
        if argv[0] == "tfr-hooks":
            from tfr_hooks import cli

            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer), pytest.raises(SystemExit, match="0"):
                cli.main([*argv[1:], "--help"])
            out = buffer.getvalue()
        elif argv[0] == "tensorboard":
            tool = shutil.which("tensorboard") or str(Path(sys.executable).with_name("tensorboard"))
            out = subprocess.run(
                [tool, "--helpfull"], capture_output=True, text=True, timeout=120
            ).stdout
        else:  # a script of this repository
            (worker,) = run_cluster([str(ROOT / argv[0]), "--help"], 0, timeout=120)
            assert worker.returncode == 0, worker.stderr[-3000:]
            out = worker.stdout
        _HELP[argv] = out
    return _HELP[argv]


def check_command(argv: list[str], where: str) -> None:
    program, *args = argv
    if program in ("python", "python3") and args[:2] == ["-m", "pip"]:
        return  # pip's own flags
    if program == "bash":
        assert (ROOT / args[0]).is_file(), f"{where}: no file {args[0]}"
        return
    if program == "tox":
        assert args[0] == "-e", f"{where}: expected `tox -e ENVS`, got {argv}"
        missing = set(args[1].split(",")) - tox_environments()
        assert not missing, f"{where}: tox.ini has no environment {sorted(missing)}"
        return
    if program in ("python", "python3"):
        script, *args = args
        assert (ROOT / script).is_file(), f"{where}: no script {script}"
        key: tuple[str, ...] = (script,)
    elif program == "tfr-hooks":
        top = help_text(("tfr-hooks",))
        assert args and re.search(rf"\b{re.escape(args[0])}\b", top), (
            f"{where}: `tfr-hooks --help` lists no command {args[:1]}"
        )
        key = ("tfr-hooks", args[0])
        args = args[1:]
    elif program == "tensorboard":
        key = ("tensorboard",)
    else:
        raise AssertionError(f"{where}: a command this test does not know: {argv}")
    text = help_text(key)
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--"):
            assert re.search(rf"(^|[\s,\[]){re.escape(flag)}\b", text, re.M), (
                f"{where}: `{' '.join(key)} --help` has no flag {flag}"
            )


CONSOLE_BLOCKS = [
    (document, line, block)
    for document in DOCUMENTS
    for line, block in blocks(document, "console", "bash", "sh", "")
    if commands(block)
]


@pytest.mark.slow
@pytest.mark.main_only
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("document", "line", "block"),
    CONSOLE_BLOCKS,
    ids=[f"{d.relative_to(ROOT).as_posix()}:{n}" for d, n, _ in CONSOLE_BLOCKS],
)
def test_console_commands_exist_with_their_flags(document: Path, line: int, block: str) -> None:
    for argv in commands(block):
        check_command(argv, f"{document.relative_to(ROOT)}:{line}")


def test_command_check_catches_a_flag_that_does_not_exist() -> None:
    with pytest.raises(AssertionError, match="has no flag --no-such-flag"):
        check_command(["tfr-hooks", "inspect", "x.tfrecord", "--no-such-flag"], "here")
    with pytest.raises(AssertionError, match="no environment"):
        check_command(["tox", "-e", "lint,no-such-env"], "here")


def documented_signatures() -> list[tuple[str, int, str]]:
    """``(document, line, text)`` of each call written out in a ``text`` block of the docs."""
    found = []
    for document in DOCUMENTS:
        for line, block in blocks(document, "text"):
            for match in re.finditer(r"^([\w.]+)\((.*?)\)(?: -> .*)?$", block, re.M | re.S):
                found.append((document.name, line, match.group(0)))
    return found


SIGNATURES = {"FunctionLoop": tfr_hooks.FunctionLoop, "loop.run": tfr_hooks.FunctionLoop.run}


def test_documented_signatures_are_the_codes() -> None:
    checked = 0
    for document, line, text in documented_signatures():
        name, rest = text.split("(", 1)
        if name not in SIGNATURES:
            continue
        tree = ast.parse(f"def f({rest.rsplit(')', 1)[0]}): pass")
        documented = tree.body[0].args  # type: ignore[attr-defined]
        actual = [
            p for p in inspect.signature(SIGNATURES[name]).parameters.values() if p.name != "self"
        ]
        positional = [a.arg for a in documented.args]
        keyword = [a.arg for a in documented.kwonlyargs]
        where = f"{document}:{line} {name}"
        assert positional + keyword == [p.name for p in actual], where
        assert keyword == [p.name for p in actual if p.kind is p.KEYWORD_ONLY], where
        defaults = dict(
            zip(
                positional[len(positional) - len(documented.defaults) :],
                documented.defaults,
                strict=True,
            )
        )
        defaults.update(
            (a.arg, d)
            for a, d in zip(documented.kwonlyargs, documented.kw_defaults, strict=True)
            if d is not None
        )
        for p in actual:
            if p.default is inspect.Parameter.empty:
                assert p.name not in defaults, f"{where}: {p.name} has no default"
            else:
                assert p.name in defaults, f"{where}: {p.name}'s default is not written"
                assert ast.literal_eval(defaults[p.name]) == p.default, f"{where}: {p.name}"
        checked += 1
    assert checked == len(SIGNATURES)


def test_benchmark_summary_is_generated_from_the_results_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/benchmarks.md quotes the latest full run: regenerated from latest.json, unchanged."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    for name in ("bench_configs", "bench_report"):
        sys.modules.pop(name, None)
    import bench_report

    tables, meta = bench_report.load_results(str(ROOT / "bench" / "results" / "latest.json"))
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    summary = bench_report.render_summary(tables, meta)
    assert bench_report.replace_summary(page, summary) == page
    assert f"{meta['write_rate']:,.0f} examples/s" in summary  # the figures are the run's


def test_benchmark_targets_state_their_anchor_in_the_docs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 56: docs/benchmarks.md gives every target's anchor and every restated target."""
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    sys.modules.pop("bench_anchors", None)
    import bench_anchors

    page = (ROOT / "docs" / "benchmarks.md").read_text()
    block = bench_anchors.render_anchors()
    assert bench_anchors.replace_anchors(page, block) == page
    for anchor in bench_anchors.ANCHORS:  # one line each: the target, its peer, the reason
        assert anchor.anchor and anchor.why
        assert f"| {anchor.label} |" in block.replace("\\|", "|")
    assert "tensor-fed >= 3x feed_dict parsing in Python" in block  # an old form, kept


#: A measured figure: a number with a unit of speed, time or ratio (``1.48x``, ``695,347
#: ex/s``, ``0.33 s``, ``4.8 ms``, ``14 us``, ``2.1%``).
MEASURED = re.compile(
    r"(?<![\w.])(\d[\d,]*(?:\.\d+)?(?:-\d[\d,]*(?:\.\d+)?)?)"
    r"(?:x\b|\u00d7|(?: million)? ?(?:ex/s|examples/s|ms|us|\u00b5s|s|seconds)\b|%)"
)
#: Words just before a figure that make it a target or a setting, not a measurement.
TARGET = re.compile(r"(>=|<=|<|>|at least|at most|under|less than|more than|within|not)\s*$")


def measured_figures(markdown: str) -> list[str]:
    """Measured figures stated in ``markdown``'s prose, outside code and the generated block.

    The rule: outside the block ``bench/run.py`` generates, fenced blocks and code spans, a
    number followed by ``x``, ``ex/s``, ``examples/s``, ``ms``, ``us``, ``s`` or ``%`` is a
    measured figure, unless a comparison (``>=``, ``at least``, ``under``, ``within``,
    ``not`` ...) comes just before it: then it is a target. Settings (batch sizes, example
    counts, ``32 MiB``, ``--repeats 5``) have no such unit, or are code.
    """
    start, end = "<!-- benchmark summary:", "<!-- end of benchmark summary -->"
    if start in markdown:
        head, _, rest = markdown.partition(start)
        markdown = head + rest.partition(end)[2]
    prose = re.sub(r"`[^`]*`", "`code`", FENCE.sub("", markdown))
    prose = re.sub(r"\s+", " ", prose)  # a target's words may end the line before
    return [
        f"{match.group(0)!r} in: ...{prose[max(0, match.start() - 60) : match.end() + 20]}..."
        for match in MEASURED.finditer(prose)
        if not TARGET.search(prose[max(0, match.start() - 20) : match.start()])
    ]


def test_benchmark_prose_links_the_results_instead_of_copying_figures() -> None:
    """docs/benchmarks.md's figures live in the generated block and bench/results/*.md."""
    assert not measured_figures((ROOT / "docs" / "benchmarks.md").read_text())
    # the rule sees a copied figure, and lets targets, settings and the block through
    copied = measured_figures("The in-memory row reads 1.48x .cache() at 695,347 ex/s.")
    assert [found.split(" in: ")[0] for found in copied] == ["'1.48x'", "'695,347 ex/s'"]
    assert len(measured_figures("A step of 4.8 ms; 15-25 s; 0.9-1.2 million ex/s.")) == 3
    settings = (
        "Batch 128, 60,000 examples, 32 MiB, `--repeats 5`, a target of at least 1.5x,\n"
        "hooks cost < 3%, within 10% of the ceiling, `python bench/run.py --epochs 2`.\n"
        "<!-- benchmark summary: generated -->\n| row | 53,859 ex/s | 1.40x |\n"
        "<!-- end of benchmark summary -->\n"
    )
    assert measured_figures(settings) == []


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading (mkdocs.yml's toc uses the same slugs)."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("document", ["README.md", "CONTRIBUTING.md"])
def test_top_level_links_reach_a_file_and_its_heading(document: str) -> None:
    """mkdocs checks the links of docs/ strictly; these two pages are outside it."""
    text = (ROOT / document).read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", FENCE.sub("", text))
    assert links
    for link in links:
        if re.match(r"^[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), f"{document}: no file {path}"
        if anchor:
            headings = re.findall(r"^#+ (.*)$", FENCE.sub("", target.read_text()), re.M)
            assert anchor in {_slug(h) for h in headings}, f"{document}: no heading #{anchor}"


def test_every_published_page_is_in_the_site_navigation() -> None:
    """`mkdocs build --strict` fails on a page the nav leaves out; the suite says so first.

    The site publishes docs/ and, through docs/_repo_files.py, bench/results/ at its own path.
    """
    nav = set(re.findall(r"^\s*- [^:]+: (\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    pages |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "bench/results").rglob("*.md")}
    assert sorted(pages - nav) == [], "pages missing from mkdocs.yml's nav"
    assert sorted(nav - pages) == [], "mkdocs.yml's nav names pages that do not exist"


def test_readme_is_an_entry_point() -> None:
    """At most 160 lines, linking the docs pages, the API pages and the generated results."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 160
    for page in (ROOT / "docs").glob("*.md"):
        if page.name != "index.md":
            assert f"(docs/{page.name}" in text, f"the README does not link docs/{page.name}"
    for page in (ROOT / "docs" / "api").glob("*.md"):
        assert f"(docs/api/{page.name})" in text, f"the README does not link docs/api/{page.name}"
    assert "(bench/results/latest.md)" in text
    assert "| configuration |" not in text  # the results' table is linked, not copied
