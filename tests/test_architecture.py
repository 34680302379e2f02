"""Dependencies point inward (STYLE.md): the rules engine is pure and imports nothing of ours."""

from __future__ import annotations

import ast
from pathlib import Path

RULES = Path(__file__).parents[1] / "snl_pbem" / "rules"

# No I/O, clock, logging, database or mail in the rules engine; randomness only seeded.
FORBIDDEN = {
    "os", "io", "sys", "time", "datetime", "logging", "socket", "pathlib", "subprocess",
    "sqlalchemy", "alembic", "jinja2", "imapclient", "aiosmtpd", "apscheduler", "smtplib",
    "imaplib", "email", "threading", "asyncio",
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
    files = sorted(RULES.glob("*.py"))
    assert len(files) >= 5
    for path in files:
        for name in imports_of(path):
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"{path.name} imports {name}"
            if top == "snl_pbem":
                assert name.startswith("snl_pbem.rules"), f"{path.name} imports {name}"


def test_rules_engine_never_prints() -> None:
    for path in RULES.glob("*.py"):
        calls = [n for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Call) and getattr(n.func, "id", None) in ("print", "open")]
        assert not calls, f"{path.name} calls print/open"


def test_every_package_is_listed_in_pyproject() -> None:
    import tomllib

    root = RULES.parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "snl_pbem").rglob(
        "__init__.py")}
    assert found <= listed, f"add to pyproject.toml [tool.setuptools] packages: {found - listed}"


def test_store_and_mail_stay_apart() -> None:
    """STYLE.md: mail and store never import each other's internals."""
    root = RULES.parent
    for package, other in (("mail", "snl_pbem.store"), ("store", "snl_pbem.mail")):
        for path in (root / package).glob("*.py"):
            assert not any(n.startswith(other) for n in imports_of(path)), path.name
