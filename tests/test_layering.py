"""The file list shows the two modes, and data flows one way between the layers.

- ``tfr_hooks/tfrecord/`` (file I/O and its sharding policy) imports nothing of the
  package above it but the argument checks (``tfr_hooks.checks``), the task identity
  (``tfr_hooks.task``: who this process is in a cluster), the tf.data service's address
  checks (``tfr_hooks.service.address``) and TensorFlow's private APIs
  (``tfr_hooks.tf_private``);
- the shared core (``engine``, ``hooks``, ``checks``, ``signals``, ``keras_callbacks``,
  ``tensorboard``, ...) imports neither mode;
- ``tfr_hooks/graph/`` (graph mode) and ``tfr_hooks/tf2/`` (TensorFlow 2) never import
  each other.

Checked twice: statically, on every module's imports, and at run time, on what importing
the TFRecord readers loads.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tfr_hooks"

# the rules read the package's source, the same on every Python and TensorFlow: CI's
# main Python runs them, the ends of the range leave them out
pytestmark = pytest.mark.main_only


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("tfrecord", "graph", "tf2"):
        return parts[1]
    return "core"


#: layer -> the layers it may import from
ALLOWED = {
    "tfrecord": {"tfrecord"},
    "core": {"core", "tfrecord"},
    "graph": {"graph", "core", "tfrecord"},
    "tf2": {"tf2", "core", "tfrecord"},
}
#: the only modules of the core the tfrecord layer may use: the argument checks, the task
#: identity, the tf.data service's address checks (``service=``) with their package (whose
#: ``__init__`` imports nothing), and TensorFlow's private APIs (``tf_private``)
TFRECORD_MAY_USE = {
    "tfr_hooks.checks",
    "tfr_hooks.task",
    "tfr_hooks.service",
    "tfr_hooks.service.address",
    "tfr_hooks.tf_private",
}
#: the core modules every layer may import, which therefore import nothing of the package
#: but each other (else tfrecord would reach the rest of the core through them)
FOUNDATION = TFRECORD_MAY_USE


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The syntax tree of a module, parsed once for all the rules (which only read it)."""
    return ast.parse(path.read_text())


def imports(path: Path) -> set[str]:
    """The ``tfr_hooks`` modules ``path`` imports (at any depth of its code)."""
    names = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("tfr_hooks"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfr_hooks"):
            module = node.module or ""
            for alias in node.names:  # `from tfr_hooks.tfrecord import sharding` is a module
                candidate = f"{module}.{alias.name}"
                names.add(candidate if candidate in MODULES else module)
    return names


MODULES = modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_each_module_imports_only_the_layers_below_or_beside_it(module: str) -> None:
    if module == "tfr_hooks":
        return  # the package's public names, imported on first use
    own = layer(module)
    for imported in imports(MODULES[module]):
        if imported == "tfr_hooks":  # `from tfr_hooks import X`: resolve X's module
            continue
        if own == "tfrecord" and imported in TFRECORD_MAY_USE:
            continue
        assert layer(imported) in ALLOWED[own], f"{module} ({own}) imports {imported}"


def test_the_modules_tfrecord_may_use_import_only_each_other() -> None:
    for module in sorted(FOUNDATION):
        assert imports(MODULES[module]) <= FOUNDATION, module


def test_the_task_identity_reads_tf_config_without_importing_tensorflow() -> None:
    """A launcher (``--workers N``) learns its task without paying for TensorFlow."""
    script = (
        "import json, os, sys\n"
        "os.environ['TF_CONFIG'] = json.dumps({'cluster': {'worker': ['a:1', 'b:2']},"
        " 'task': {'type': 'worker', 'index': 1}})\n"
        "from tfr_hooks.task import _from_tf_config\n"
        "print(_from_tf_config().is_chief, 'tensorflow' in sys.modules)\n"
    )
    assert python_output(script).split() == ["False", "False"]


def test_no_module_reaches_another_through_the_package_namespace() -> None:
    """``from tfr_hooks import X`` inside the package hides which layer X comes from."""
    for module, path in MODULES.items():
        if module == "tfr_hooks":
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and node.module == "tfr_hooks":
                names = [a.name for a in node.names]
                assert names == ["tfrecord"], f"{module}: from tfr_hooks import {names}"


def test_no_module_imports_a_private_name_from_another() -> None:
    """What two modules share is public in one of them (``_x`` stays in its module)."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tfr_hooks"):
                found += [
                    f"{module}: {node.module}.{a.name}" for a in node.names if a.name[0] == "_"
                ]
    assert found == []


#: the files of a TensorFlow Datasets directory, which only its source may name
TFDS_FILE_NAMES = ("dataset_info.json", "features.json", ".labels.txt")


def _code_strings(path: Path) -> list[str]:
    """The string constants of a module's code: its docstrings left out."""
    tree = parsed(path)
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            docstrings.add(id(body[0].value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def test_only_the_tfds_source_names_a_tfds_file() -> None:
    """The rest of the package asks the source, never the file names (in its code)."""
    found = [
        f"{module}: {name}"
        for module, path in MODULES.items()
        if module != "tfr_hooks.tfrecord.sources.tfds"
        for text in _code_strings(path)
        for name in TFDS_FILE_NAMES
        if name in text
    ]
    assert found == []
    tfds = _code_strings(MODULES["tfr_hooks.tfrecord.sources.tfds"])
    assert all(any(name in text for text in tfds) for name in TFDS_FILE_NAMES)


#: what looks for the ``schema.json`` written beside files, which only the sources may ask
SIDECAR_FINDERS = ("find_sidecar", "listed_shards")


def test_only_the_sources_look_for_a_sidecar_beside_the_files() -> None:
    """Inspection, diagnosis and conversion ask the source what was written beside a file."""
    found = [
        f"{module}: {node.module}.{alias.name}"
        for module, path in MODULES.items()
        if not module.startswith("tfr_hooks.tfrecord.sources.")
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name in SIDECAR_FINDERS
    ]
    assert found == []


def test_the_two_modes_have_their_own_folders() -> None:
    graph = {p.stem for p in (PACKAGE / "graph").glob("*.py")}
    tf2 = {p.stem for p in (PACKAGE / "tf2").glob("*.py")}
    assert {"session_loop", "hooked_session", "queue_runners", "checkpoint"} <= graph
    assert {"function_loop", "preemption", "distribute"} <= tf2


def python_output(script: str) -> str:
    """What ``python -c script`` prints in a fresh interpreter (which must succeed)."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


SCRIPT = """
import sys
import tfr_hooks.tfrecord
from tfr_hooks import tfrecord
tfrecord.dataset, tfrecord.read_batches, tfrecord.write, tfrecord.inspect
loaded = sorted(m for m in sys.modules if m.startswith("tfr_hooks"))
print("\\n".join(loaded))
"""


@pytest.mark.slow
def test_the_tfrecord_layer_loads_no_hook_or_loop_module() -> None:
    loaded = set(python_output(SCRIPT).split())
    assert "tfr_hooks.tfrecord.pipelines.read" in loaded
    outside = {m for m in loaded if layer(m) != "tfrecord" and m != "tfr_hooks"}
    assert outside <= TFRECORD_MAY_USE, sorted(outside)


def test_the_tfrecord_modules_import_each_other_without_a_cycle() -> None:
    """Each tfrecord module's imports, at any depth of its code, form an acyclic graph."""
    tfrecord = {m for m in MODULES if layer(m) == "tfrecord" and m != "tfr_hooks.tfrecord"}
    graph = {m: sorted(imports(MODULES[m]) & tfrecord - {m}) for m in tfrecord}
    assert "tfr_hooks.tfrecord.schema.sidecar" in graph["tfr_hooks.tfrecord.sources.base"]
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        if module in path:
            cycle = " -> ".join((*path[path.index(module) :], module))
            pytest.fail(f"import cycle: {cycle}")
        if module in done:
            return
        for imported in graph[module]:
            visit(imported, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


#: what a loop asks a hook about: declared on tfr_hooks.Hook, read by capabilities_of
CAPABILITIES = {
    "requires_session",
    "needs_model_state",
    "owns_signals",
    "chief_only",
    "needs_every_step",
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_looks_things_up_in_sys_modules_or_probes_hooks(module: str) -> None:
    """Imports are explicit, and hook capabilities are declared, never probed."""
    source = MODULES[module].read_text()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "modules":
            assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), (
                f"{module}:{node.lineno} reads sys.modules"
            )
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr"):
            continue
        target, *rest = node.args
        name = rest[0].value if rest and isinstance(rest[0], ast.Constant) else None
        assert name not in CAPABILITIES | {"loop"}, (
            f"{module}:{node.lineno} probes getattr(..., {name!r})"
        )
        probed = target.id if isinstance(target, ast.Name) else ""
        assert probed not in {"hook", "h"}, f"{module}:{node.lineno} probes a hook with getattr"


def test_every_capability_is_declared_on_hook() -> None:
    from tfr_hooks import Hook
    from tfr_hooks.hooks import HookCapabilities, capabilities_of

    assert {f.name for f in dataclasses.fields(HookCapabilities)} == CAPABILITIES
    assert capabilities_of(Hook()) == HookCapabilities()
    for name in CAPABILITIES:
        assert name in vars(Hook), name
    source = inspect.getsource(Hook)
    for name in CAPABILITIES:  # each one documented where it is declared
        assert "#:" in source.split(f"\n    {name}:")[0].splitlines()[-1], name


def test_the_loop_state_is_declared_on_hook() -> None:
    """``Hook.loop`` has a declared default, so no hook needs to probe for it."""
    from tfr_hooks import Hook
    from tfr_hooks.hooks import LoopState

    hook = Hook()
    assert hook.attached_loop is None
    with pytest.raises(RuntimeError, match=r"Expected Hook to be run by a loop.*Received: no"):
        hook.loop  # noqa: B018
    state = LoopState()
    hook.set_loop(state)
    assert hook.loop is state and hook.attached_loop is state


@pytest.mark.slow  # a fresh process imports TensorFlow (about 13 s of CPU)
def test_graph_mode_loads_tf_keras_only_for_a_keras_training_graph() -> None:
    """SessionLoop recognizes a KerasTrainingGraph by its light base class in setup.py."""
    script = (
        "import sys, tfr_hooks.graph.session_loop, tfr_hooks.graph.hooked_session\n"
        "print('tf_keras' in sys.modules)\n"
    )
    assert python_output(script).split() == ["False"]


def _code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function from its ``def`` to its end, signature counted, docstring not."""
    assert function.end_lineno is not None
    lines = function.end_lineno - function.lineno + 1
    first = function.body[0]
    documented = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    if documented and isinstance(first.value.value, str):
        assert first.end_lineno is not None
        lines -= first.end_lineno - first.lineno + 1
    return lines


def test_code_lines_count_the_signature_and_not_the_docstring() -> None:
    """The rule's own count: a long signature counts, a long docstring does not."""
    source = 'def f(\n    a,\n    b,\n):\n    """Doc.\n\n    More.\n    """\n    return a\n'
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    assert _code_lines(function) == 5


def test_modules_read_in_a_sitting_and_functions_on_a_screen() -> None:
    """No module over 700 lines (it holds several concepts), no function over 80 lines
    counting its signature (its docstring aside)."""
    for module, path in MODULES.items():
        source = path.read_text()
        assert len(source.splitlines()) <= 700, f"{module}: {len(source.splitlines())} lines"
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = _code_lines(node)
                assert lines <= 80, f"{module}.{node.name}: {lines} lines with its signature"


#: the folders of ``tfr_hooks/tfrecord/``, lowest first: each imports only the folders
#: before it (and ``tfrecord.errors``). A record format goes in ``formats/``, a kind of
#: source in ``sources/``, an inspection tool in ``inspection/``, an order in
#: ``pipelines/`` behind its seam, writing and conversion in ``writing/``.
TFRECORD_FOLDERS = ("schema", "formats", "sources", "inspection", "pipelines", "writing")


def _folder(module: str) -> str | None:
    """The folder of ``tfrecord/`` a module is in (``None`` for the package's own files)."""
    parts = module.split(".")
    if parts[:2] != ["tfr_hooks", "tfrecord"] or len(parts) < 4:
        return None
    return parts[2]


def _named_imports(path: Path) -> set[str]:
    """Every ``tfr_hooks`` module ``path`` imports, lazily too: ``import_module("a.b")`` and
    ``"a.b:Class"`` strings given to a dispatcher count as imports."""
    found = imports(path)
    for text in _code_strings(path):
        name = text.partition(":")[0]
        if name in MODULES:
            found.add(name)
    return found


@functools.cache
def folder_edges() -> dict[tuple[str, str], list[str]]:
    """``(importer's folder, imported folder)`` -> the module imports that make the edge
    (found once for the folder rules, which only read it)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, path in MODULES.items():
        own = _folder(module)
        if own is None:
            continue
        for imported in _named_imports(path):
            other = _folder(imported)
            if other is not None and other != own:
                edges.setdefault((own, other), []).append(f"{module} -> {imported}")
    return edges


def test_the_tfrecord_folders_are_the_ones_the_order_names() -> None:
    found = {p.name for p in (PACKAGE / "tfrecord").iterdir() if (p / "__init__.py").exists()}
    assert found == set(TFRECORD_FOLDERS)


@pytest.mark.parametrize("folder", TFRECORD_FOLDERS)
def test_a_tfrecord_folder_imports_only_the_folders_below_it(folder: str) -> None:
    """No folder imports from a folder that imports it, lazy imports included."""
    below = set(TFRECORD_FOLDERS[: TFRECORD_FOLDERS.index(folder)])
    wrong = [
        how
        for (own, other), hows in folder_edges().items()
        if own == folder and other not in below
        for how in hows
    ]
    assert wrong == []


def test_the_folder_graph_of_tfrecord_has_no_cycle() -> None:
    """Whatever the pinned order says, a cycle between two folders is found on its own."""
    graph: dict[str, set[str]] = {}
    for own, other in folder_edges():
        graph.setdefault(own, set()).add(other)
    done: set[str] = set()

    def visit(folder: str, path: tuple[str, ...]) -> None:
        assert folder not in path, f"a cycle of folders: {' -> '.join((*path, folder))}"
        if folder in done:
            return
        for other in sorted(graph.get(folder, ())):
            visit(other, (*path, folder))
        done.add(folder)

    for folder in sorted(graph):
        visit(folder, ())


def _is_frozen_dataclass(node: ast.ClassDef) -> bool:
    """Whether a class is decorated ``@dataclass(frozen=True)`` (or ``dataclasses.``)."""
    for decorator in node.decorator_list:
        if not isinstance(decorator, ast.Call):
            continue
        name = ast.unparse(decorator.func)
        frozen = any(
            k.arg == "frozen" and isinstance(k.value, ast.Constant) and k.value.value is True
            for k in decorator.keywords
        )
        if name in ("dataclass", "dataclasses.dataclass") and frozen:
            return True
    return False


def _own_fields(node: ast.ClassDef) -> set[str]:
    """The fields a class declares in its own body (annotated names)."""
    return {
        item.target.id
        for item in node.body
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }


def _frozen_writes(tree: ast.Module) -> list[tuple[ast.Call, str | None]]:
    """Each ``object.__setattr__`` call, and why it breaks the rule (``None``: it keeps it).

    The rule: a frozen value is only written while it is built: in the ``__init__`` or
    ``__post_init__`` of a ``@dataclass(frozen=True)`` class, on ``self``, and to a field
    that class declares itself (not one a subclass adds to a library's frozen value).
    """
    found: list[tuple[ast.Call, str | None]] = []

    def visit(node: ast.AST, cls: ast.ClassDef | None, function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child, None)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, cls if function is None else None, child.name)
                continue
            if isinstance(child, ast.Call) and ast.unparse(child.func) == "object.__setattr__":
                found.append((child, _broken(child, cls, function)))
            visit(child, cls, function)

    visit(tree, None, None)
    return found


def _broken(call: ast.Call, cls: ast.ClassDef | None, function: str | None) -> str | None:
    if cls is None or function not in ("__init__", "__post_init__"):
        return "outside the __init__ or __post_init__ of a class"
    if not _is_frozen_dataclass(cls):
        return f"in {cls.name}, which is no @dataclass(frozen=True)"
    target, name = [*call.args, None, None][:2]
    if not (isinstance(target, ast.Name) and target.id == "self"):
        return "on another object than self"
    if not (isinstance(name, ast.Constant) and name.value in _own_fields(cls)):
        return f"to a field {cls.name} does not declare"
    return None


def test_a_frozen_value_is_written_only_while_its_own_class_builds_it() -> None:
    """No ``object.__setattr__`` on a frozen value after it is built (issue 53, part 3).

    What one part knows and another needs travels as a declared value (a TFDS directory's
    decoding beside its plain schema), never as attributes set on a frozen object.
    """
    writes = [
        (module, call.lineno, why)
        for module, path in MODULES.items()
        for call, why in _frozen_writes(parsed(path))
    ]
    assert [w for w in writes if w[2] is not None] == []
    assert len(writes) >= 2  # the rule reads the calls: Schema and Feature build themselves


def test_the_rule_on_frozen_writes_finds_a_subclass_writing_a_frozen_schema() -> None:
    """The shape the TFDS schema had (a Schema subclass setting attributes) is caught."""
    tree = ast.parse(
        "class TfdsSchema(Schema):\n"
        "    labels: dict\n"
        "    def __init__(self, parts):\n"
        "        super().__init__(parts)\n"
        "        object.__setattr__(self, 'labels', {})\n"
    )
    assert [why for _, why in _frozen_writes(tree)] == [
        "in TfdsSchema, which is no @dataclass(frozen=True)"
    ]


def test_no_class_of_the_package_subclasses_the_schema() -> None:
    """A source's features are a plain Schema; what else it knows is a value beside it."""
    found = [
        f"{module}: {node.name}"
        for module, path in MODULES.items()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(base).split(".")[-1] in ("Schema", "Feature") for base in node.bases)
    ]
    assert found == []


def _exported_functions(path: Path) -> list[str]:
    """The functions a module names in its ``__all__``."""
    tree = parsed(path)
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            exported = [
                e.value for e in getattr(node.value, "elts", []) if isinstance(e, ast.Constant)
            ]
    functions = {
        n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    return [name for name in exported if name in functions]


def _names_used(path: Path) -> set[str]:
    """The names a file's code reads (``f``, ``module.f``), its definitions left out."""
    names = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            names.update(alias.name for alias in node.names)
    return names


#: the functions a user's own code calls to extend the readers (a source or a record format
#: from outside the package, docs/layout.md): their callers are outside the package
EXTENSION_POINTS = {
    "register_source",
    "unregister_source",
    "register_format",
    "unregister_format",
    "index_of_offsets",
}


def test_no_function_is_exported_without_a_caller_outside_the_tests() -> None:
    """A function in a module's ``__all__`` has a caller in the package, bench or examples."""
    root = PACKAGE.parent
    others = [*MODULES.values(), *root.glob("bench/*.py"), *root.glob("examples/*.py")]
    used = {path: _names_used(path) for path in others}
    uncalled = [
        f"{module}.{name}"
        for module, path in MODULES.items()
        for name in _exported_functions(path)
        if name not in EXTENSION_POINTS
        and not any(name in names for other, names in used.items() if other != path)
        and not _called_in_its_module(path, name)
    ]
    assert uncalled == []


def _called_in_its_module(path: Path, name: str) -> bool:
    """Whether the module's own code reads ``name`` (a call, or the function passed on)."""
    return any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)
        for node in ast.walk(parsed(path))
    )
