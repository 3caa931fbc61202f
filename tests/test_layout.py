"""The package's layout: the layers written in docs/package.md, imports that only point down them, no cycles,
no module over 800 lines, complete ``__all__`` lists, and every ``fabnb`` name the docs and notebooks use.

Each check reads the source as text (``ast``), so it sees the imports inside functions too.
Checked by breaking it once: an ``from ..experiment import plan`` added to ``fabnb/rag/grid.py``
failed ``test_imports_only_point_down_the_layers`` naming that line; a ``from .cli import main`` in
``fabnb/records.py`` failed it and the cycle test.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fabnb"
EXPERIMENT_ORDER = ["prices", "fields", "systems", "config", "output", "progress", "planning", "windows", "report",
                    "testing", "batching", "run", "comparison", "history"]


def _table(text: str, start: str, end: str) -> list[tuple[str, list[str]]]:
    body = text[text.index(start) + len(start):text.index(end)]
    rows = [line.split("|")[1:3] for line in body.strip().splitlines()[2:] if line.startswith("|")]
    return [(layer.strip(), re.findall(r"`([a-z_]+)", modules)) for layer, modules in rows]


def layers() -> list[tuple[str, list[str]]]:
    """The layers of docs/package.md, top (foundations) first: (name, [module or subpackage, ...])."""
    return _table((ROOT / "docs" / "package.md").read_text(), "<!-- layers -->", "<!-- /layers -->")


def _module_name(path: Path) -> str:
    parts = list(path.with_suffix("").relative_to(ROOT).parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, fabnb module) for every import in the file, those inside functions too."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    known = modules()
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("fabnb"):
                continue
            for alias in node.names:  # `from . import rag` imports the module fabnb.rag
                sub = f"{target}.{alias.name}"
                out.append((node.lineno, sub if sub in known else target))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("fabnb")]
    return out


def _entry(module: str) -> str:
    """The table entry of a module: its top-level name under fabnb ('' for the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer_of() -> dict[str, int]:
    return {m: i for i, (_, ms) in enumerate(layers()) for m in ms}


def test_every_module_is_in_exactly_one_layer():
    listed = [m for _, ms in layers() for m in ms]
    assert len(listed) == len(set(listed)), f"a module is in two layers: {listed}"
    present = {_entry(m) for m in modules()} - {""}
    assert set(listed) == present, (f"docs/package.md's layers miss {sorted(present - set(listed))} and name "
                                    f"modules that do not exist: {sorted(set(listed) - present)}")


def test_imports_only_point_down_the_layers():
    layer_of, names = _layer_of(), [name for name, _ in layers()]
    upward = []
    for module, path in modules().items():
        here = layer_of.get(_entry(module), len(names))  # the package root sits on top of everything
        for line, target in imports(module, path):
            entry = _entry(target)
            if entry in ("", "__version__") or entry == _entry(module):
                continue  # the package root's version, and a subpackage's own modules
            if layer_of[entry] > here:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {target} ({names[layer_of[entry]]}) from "
                              f"{names[here] if here < len(names) else 'the package root'}")
    assert not upward, "imports that point the wrong way up the layers of docs/package.md:\n" + "\n".join(upward)


def test_the_experiment_package_keeps_its_order():
    for module, path in modules().items():
        if not module.startswith("fabnb.experiment.") or module.rsplit(".", 1)[1] not in EXPERIMENT_ORDER:
            continue
        here = EXPERIMENT_ORDER.index(module.rsplit(".", 1)[1])
        for line, target in imports(module, path):
            if target.startswith("fabnb.experiment."):
                assert EXPERIMENT_ORDER.index(target.rsplit(".", 1)[1]) < here, \
                    f"{path.relative_to(ROOT)}:{line} imports {target}, which comes after it"


def test_there_is_no_import_cycle():
    graph = {m: {t for _, t in imports(m, p) if t in modules() and t != m} for m, p in modules().items()}
    # A package's __init__ re-exports its modules; a module importing its own package is a cycle only through that.
    for m in graph:
        graph[m] = {t for t in graph[m] if not (m.startswith(t + ".") and t != "fabnb")} - {"fabnb"}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(nxt):] + [node, nxt]))
            if nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_the_layers_are_the_folders():
    """Each layer is a folder of fabnb/ (``cli`` the one loose module), and docs/package.md's table lists exactly
    those, in pipeline order."""
    on_disk = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    loose = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__"}
    assert loose == {"cli"}, f"modules outside a layer's folder: {sorted(loose - {'cli'})}; move each into one"
    listed = [m for _, ms in layers() for m in ms]
    assert set(listed) == on_disk | loose, (f"docs/package.md's layers miss {sorted(on_disk - set(listed))} and "
                                            f"name folders that do not exist: {sorted(set(listed) - on_disk - loose)}")


def _code_lines(lines: list[str], node) -> int:
    """Lines of a function that hold code: its docstring, blank lines and comment lines not counted."""
    first = node.body[0]
    doc = (first.lineno, first.end_lineno) if isinstance(first, ast.Expr) and isinstance(
        getattr(first, "value", None), ast.Constant) and isinstance(first.value.value, str) else (0, -1)
    return sum(1 for n in range(node.lineno, node.end_lineno + 1)
               if not doc[0] <= n <= doc[1] and lines[n - 1].strip() and not lines[n - 1].strip().startswith("#"))


def test_no_function_is_over_80_lines_of_code():
    long = []
    for module, path in modules().items():
        text = path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                    n := _code_lines(text.splitlines(), node)) > 80:
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not long, "functions over 80 lines of code (cut them into named steps):\n" + "\n".join(long)


def test_no_private_name_is_imported_from_another_module():
    """What two modules share is public in the lower one (documented, in its ``__all__``)."""
    crossing = []
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("fabnb")):
                private = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
                if private:
                    crossing.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {private}")
    assert not crossing, "private names imported across modules:\n" + "\n".join(crossing)


def test_no_module_is_over_800_lines():
    long = {m: n for m, p in modules().items() if (n := len(p.read_text().splitlines())) > 800}
    assert not long, f"modules over 800 lines (cut them by subject): {long}"


def test_the_readme_module_table_has_the_same_layers():
    readme = (ROOT / "README.md").read_text()
    rows = _table(readme, "## The package, by pipeline stage", "What each module does:")
    assert [name for name, _ in rows] == [name for name, _ in layers()]
    for (name, docs_modules), (_, readme_modules) in zip(layers(), rows):
        missing = {m for m in docs_modules if not m.startswith("_")} - set(readme_modules)  # private: docs only
        assert not missing, f"README's {name!r} row lacks {sorted(missing)}"


def _all_of(module) -> list[str]:
    names = getattr(module, "__all__", None)
    assert names is not None, f"{module.__name__} has no __all__"
    return names


@pytest.mark.parametrize("name", sorted(m for m in modules() if m != "fabnb.models._llama_server"))
def test_every_name_in_all_exists(name):
    module = importlib.import_module(name)
    missing = [n for n in _all_of(module) if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names {missing}, which do not exist"


def test_the_experiment_package_re_exports_every_public_name():
    import fabnb.experiment as exp

    for sub in EXPERIMENT_ORDER:
        module = importlib.import_module(f"fabnb.experiment.{sub}")
        assert set(_all_of(module)) <= set(exp.__all__), f"fabnb.experiment lacks {sub}'s public names"
    for name in ("check_output", "tally", "coverage", "write_report", "plan", "run_experiment", "PRICES"):
        assert name in exp.__all__


def _names_used() -> set[str]:
    """Every ``from fabnb... import X`` and dotted ``fabnb.x.Y`` in the docs, the notebooks and the README."""
    texts = [p.read_text() for p in (ROOT / "docs").rglob("*.md")] + [(ROOT / "README.md").read_text()]
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        texts += ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"]]
    used = set()
    for text in texts:
        for module, names in re.findall(r"from (fabnb[\w.]*) import (\([^)]*\)|[\w, ]+)", text):
            used |= {f"{module}:{n.strip()}" for n in names.strip("()").replace("\n", " ").split(",") if n.strip()}
        used |= {f"dotted:{m}" for m in re.findall(r"\bfabnb(?:\.[A-Za-z_]\w*)+", text)}
    return used


#: Stage functions a notebook calls whose example would run the embedded model for minutes (a study, documents)
#: or a schema its server cannot compile in one short call: the notebook named runs each end to end in the suite.
EXAMPLE_IN_NOTEBOOK = {"fabnb.qa.generation.generate_qa": "03_generate_qa", "fabnb.judge.geval.judge_results":
                       "07_judge_answers", "fabnb.qa.documents.write_documents": "08_test_rag",
                       "fabnb.tester.study.run_study": "08_test_rag",
                       "fabnb.judge.calibration.draw_study": "13_calibrate_judge"}


def _object_of(use: str):
    """The object a docs or notebook name points to (None when it is not found)."""
    kind, name = use.split(":", 1)
    if kind != "dotted":
        return getattr(importlib.import_module(kind), name, None)
    obj, rest = _longest_module(name.split("."))
    for attr in rest:
        obj = getattr(obj, attr, None)
    return obj


def _longest_module(parts: list[str]):
    """The longest importable module prefix of a dotted name, and the attribute names after it."""
    for i in range(len(parts), 0, -1):
        try:
            return importlib.import_module(".".join(parts[:i])), parts[i:]
        except ImportError:
            continue
    raise ImportError(".".join(parts))


def test_every_function_the_docs_and_notebooks_call_has_a_runnable_example():
    import inspect

    lacking = set()
    for use in _names_used():
        obj = _object_of(use)
        if inspect.isfunction(obj) and ">>>" not in (obj.__doc__ or ""):
            lacking.add(f"{obj.__module__}.{obj.__qualname__}")
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert set(EXAMPLE_IN_NOTEBOOK.values()) <= notebooks
    assert not lacking - set(EXAMPLE_IN_NOTEBOOK), f"functions the docs or notebooks call without an example: " \
                                                    f"{sorted(lacking - set(EXAMPLE_IN_NOTEBOOK))}"


def test_every_fabnb_name_the_docs_and_notebooks_use_imports():
    broken = []
    for use in sorted(_names_used()):
        kind, name = use.split(":", 1)
        if kind != "dotted":
            if not hasattr(importlib.import_module(kind), name):
                try:
                    importlib.import_module(f"{kind}.{name}")
                except ImportError:
                    broken.append(f"from {kind} import {name}")
            continue
        # The longest importable module prefix, then attributes (a trailing file suffix such as .md is prose).
        obj, rest = _longest_module(name.split("."))
        for attr in rest:
            if not hasattr(obj, attr):
                if attr not in ("md", "py", "toml", "json", "ipynb", "jsonl", "csv"):
                    broken.append(name)
                break
            obj = getattr(obj, attr)
    assert not broken, f"names the docs or notebooks use that do not import: {broken}"


def test_every_public_module_has_an_api_page_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    for module in modules():
        if module == "fabnb" or any(part.startswith("_") for part in module.split(".")):
            continue
        page = module.removeprefix("fabnb.")
        if importlib.util.find_spec(module).submodule_search_locations and page != "experiment":
            continue  # rag and judge: one page per module
        assert (ROOT / "docs" / "api" / f"{page}.md").exists(), f"docs/api/{page}.md is missing"
        assert f"api/{page}.md" in nav, f"mkdocs.yml's nav lacks api/{page}.md"
