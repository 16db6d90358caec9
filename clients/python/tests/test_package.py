"""The package as installed: its metadata, ``py.typed``, strict typing of the package and the
examples, and a documented example for every public call."""

from __future__ import annotations

import importlib.metadata
import inspect
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import slotd

PACKAGE = Path(__file__).resolve().parents[1]
REPO = PACKAGE.parents[1]


def public_methods(cls: type) -> list[str]:
    return [n for n, v in vars(cls).items() if not n.startswith("_") and callable(v)]


def test_metadata_matches_pyproject() -> None:
    project = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    assert project["name"] == "slotd"
    assert importlib.metadata.version("slotd") == project["version"] == slotd.__version__
    requires = importlib.metadata.requires("slotd") or []
    runtime = [r for r in requires if "extra ==" not in r]
    assert len(runtime) == 1 and runtime[0].startswith("httpx"), runtime


def test_py_typed_ships_with_the_package() -> None:
    assert (Path(slotd.__file__).parent / "py.typed").exists()


def test_the_package_and_the_examples_pass_mypy_strict() -> None:
    mypy = shutil.which("mypy", path=str(Path(sys.executable).parent))
    assert mypy, "mypy is part of the test extra: pip install ./clients/python[test]"
    examples = sorted(str(p) for p in (REPO / "examples" / "python").glob("*.py"))
    assert examples, "examples/python holds the runnable examples"
    # The installed package (what users get, py.typed included) is what mypy checks, and what
    # the examples are checked against.
    for target in (["-p", "slotd"], examples):
        result = subprocess.run(
            [mypy, "--strict", "--no-incremental", "--cache-dir", os.devnull, *target],
            capture_output=True,
            text=True,
            cwd=str(REPO),
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("cls", [slotd.Client, slotd.AsyncClient])
def test_every_public_call_has_a_docstring_with_an_example(cls: type) -> None:
    for name in public_methods(cls):
        doc = inspect.getdoc(getattr(cls, name)) or ""
        assert doc, f"{cls.__name__}.{name} has no docstring"
        if cls is slotd.Client and name not in ("close",):
            assert "Example" in doc, f"Client.{name}'s docstring has no example"


def test_the_readme_shows_every_public_call() -> None:
    readme = (PACKAGE / "README.md").read_text()
    calls = set(public_methods(slotd.Client)) | set(public_methods(slotd.AsyncClient))
    for name in sorted(calls - {"close", "aclose"}):
        assert re.search(rf"\.{name}\(", readme), f"README.md has no example of {name}()"
    assert "webhooks.verify(" in readme


def test_the_async_client_has_every_call_of_the_sync_one() -> None:
    sync = set(public_methods(slotd.Client)) - {"close"}
    asynchronous = set(public_methods(slotd.AsyncClient)) - {"aclose"}
    assert sync == asynchronous
    for name in sync:
        a = inspect.signature(getattr(slotd.Client, name))
        b = inspect.signature(getattr(slotd.AsyncClient, name))
        assert list(a.parameters) == list(b.parameters), name
