"""Dependencies point inward (STYLE.md): the folder tree is the architecture.

rules      pure: imports nothing of ours outside rules
store, mail    the database and the mail formats: never app, runners or cli
app        the use cases: never site, runners or cli
site       the game pages, written from the use cases' reads: never runners or cli
runners    the long-running parts: never cli
cli        the command line: anything
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RULES = Path(__file__).parents[1] / "snl_pbem" / "rules"

# No I/O, clock, logging, database or mail in the rules engine; randomness only seeded.
FORBIDDEN = {
    "os",
    "io",
    "sys",
    "time",
    "datetime",
    "logging",
    "socket",
    "pathlib",
    "subprocess",
    "sqlalchemy",
    "alembic",
    "jinja2",
    "imapclient",
    "aiosmtpd",
    "apscheduler",
    "smtplib",
    "imaplib",
    "email",
    "threading",
    "asyncio",
}


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_rules_engine_is_pure() -> None:
    files = sorted(RULES.rglob("*.py"))
    assert len(files) >= 8
    for path in files:
        for name in imports_of(path):
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"{path.name} imports {name}"
            if top == "snl_pbem":
                assert name.startswith("snl_pbem.rules"), f"{path.name} imports {name}"


def test_rules_engine_never_prints() -> None:
    for path in RULES.rglob("*.py"):
        calls = [
            n
            for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) in ("print", "open")
        ]
        assert not calls, f"{path.name} calls print/open"


def test_every_package_is_listed_in_pyproject() -> None:
    import tomllib

    root = RULES.parents[1]
    listed = set(
        tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(root).parts) for p in (root / "snl_pbem").rglob("__init__.py")
    }
    assert found <= listed, f"add to pyproject.toml [tool.setuptools] packages: {found - listed}"


def test_store_and_mail_stay_apart() -> None:
    """STYLE.md: mail and store never import each other's internals."""
    root = RULES.parent
    for package, other in (("mail", "snl_pbem.store"), ("store", "snl_pbem.mail")):
        for path in (root / package).glob("*.py"):
            assert not any(n.startswith(other) for n in imports_of(path)), path.name


PACKAGE = RULES.parent
LAYERS = {
    "store": ("app", "runners", "cli"),
    "mail": ("app", "runners", "cli"),
    "app": ("runners", "cli", "site"),
    "site": ("runners", "cli"),
    "runners": ("cli",),
    "offline": ("app", "runners", "cli"),
    "views": ("app", "runners", "cli"),
    "boards": ("store", "mail", "app", "runners", "cli"),
}
"""For each package, the packages of ours it must never import."""


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_layers_point_inward(package: str) -> None:
    files = sorted((PACKAGE / package).rglob("*.py"))
    assert files, f"no package {package}"
    for path in files:
        for name in imports_of(path):
            parts = name.split(".")
            if parts[0] == "snl_pbem" and len(parts) > 1:
                assert parts[1] not in LAYERS[package], (
                    f"{path.relative_to(PACKAGE)} imports {name}: {package} must not import "
                    f"{', '.join(LAYERS[package])}"
                )


def test_shared_modules_import_no_layer_above_them() -> None:
    """config, errors, timeutil, keys, crashpoints, ownership, procs: used by every layer,
    so they import none of app, runners or cli."""
    for path in sorted(PACKAGE.glob("*.py")):
        for name in imports_of(path):
            parts = name.split(".")
            if parts[0] == "snl_pbem" and len(parts) > 1:
                assert parts[1] not in ("app", "runners", "cli"), f"{path.name} imports {name}"


def test_no_module_left_flat() -> None:
    """Only the shared modules stand at the top of the package; the rest live in a layer."""
    flat = {p.stem for p in PACKAGE.glob("*.py")}
    assert flat <= {
        "__init__",
        "config",
        "errors",
        "timeutil",
        "keys",
        "crashpoints",
        "ownership",
        "procs",
        "i18n",  # the players' languages: config, mail, app and site all speak them
    }, flat


def test_the_command_line_holds_no_sql() -> None:
    """cli calls app: it opens no transaction and builds no query of its own."""
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        text = path.read_text()
        assert ".transaction(" not in text, f"{path.name} opens a transaction"
        for name in imports_of(path):
            if name.startswith("sqlalchemy"):
                assert name in ("sqlalchemy.exc", "sqlalchemy.engine"), f"{path.name}: {name}"


def test_the_runners_own_timing_and_wiring_only() -> None:
    """runners hold no SQL and write no message: they call app at the right moments."""
    for path in sorted((PACKAGE / "runners").glob("*.py")):
        text = path.read_text()
        assert ".transaction(" not in text, f"{path.name} opens a transaction"
        assert "enqueue_mail" not in text and "template=" not in text, f"{path.name} writes mail"
        assert not any(n.startswith("sqlalchemy") for n in imports_of(path)), path.name


def module_graph(package: Path) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of ours it imports, anywhere in the file:
    a function-local import is an arrow too (it is how a cycle hides). ``from a import b``
    is an arrow to ``a.b`` when ``b`` is a module; relative imports are resolved."""
    root = package.parent
    modules: dict[str, Path] = {}
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(root).with_suffix("").parts)
        modules[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        arrows: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                arrows.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = here.split(".")
                    base = parts[: len(parts) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source in modules:
                    arrows.add(source)
                arrows.update(
                    f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules
                )
        graph[name] = arrows - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (``[a, b, ..., a]``), or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_path:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in done:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(graph):
        if start not in done:
            found = visit(start)
            if found:
                return found
    return None


def test_no_import_cycles() -> None:
    """Issue 22: no module of ours imports, even inside a function, one that imports it back
    (directly or round a longer loop). Move the code to where it belongs instead."""
    cycle = find_cycle(module_graph(PACKAGE))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_check_sees_hidden_and_relative_imports(tmp_path: Path) -> None:
    """The check itself: a cycle closed by a function-local ``from pkg import mod`` or a
    relative import is found and named."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.sub import b\n")
    (package / "sub" / "b.py").write_text("from .c import f\n")
    (package / "sub" / "c.py").write_text("def f():\n    from pkg import a\n")
    assert module_graph(package)["pkg.sub.b"] == {"pkg.sub.c"}
    assert find_cycle(module_graph(package)) == ["pkg.a", "pkg.sub.b", "pkg.sub.c", "pkg.a"]
    (package / "sub" / "c.py").write_text("def f():\n    pass\n")
    assert find_cycle(module_graph(package)) is None


APP_LINES = 500
"""Issue 22: an app module longer than this is a grab bag unless its docstring says why."""


def test_app_modules_stay_small_or_say_why() -> None:
    long = []
    for path in sorted((PACKAGE / "app").rglob("*.py")):
        text = path.read_text()
        lines = text.count("\n")
        doc = ast.get_docstring(ast.parse(text)) or ""
        reason = any(line.startswith("Over 500 lines:") for line in doc.splitlines())
        if lines > APP_LINES and not reason:
            long.append(f"{path.relative_to(PACKAGE)} ({lines} lines)")
    assert not long, (
        "split these by concept, or give the reason on a docstring line starting "
        "'Over 500 lines:': " + ", ".join(long)
    )
