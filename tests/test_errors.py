"""The two error vocabularies: every code defined once, in its own style, and documented in
``docs/errors.md`` — no more, no fewer."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

from streams.exceptions import HelixError
from workers.exceptions import RunErrorCode

DOC = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
PACKAGES = ["streams", "workers", "chat"]


def _import_everything() -> None:
    for name in PACKAGES:
        package = importlib.import_module(name)
        for module in pkgutil.walk_packages(package.__path__, f"{name}."):
            if ".migrations" not in module.name and not module.name.endswith(".management.commands"):
                importlib.import_module(module.name)


def _subclasses(cls: type[HelixError]) -> list[type[HelixError]]:
    found: list[type[HelixError]] = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def defined_codes() -> dict[str, list[str]]:
    """Each error code → the classes that define it (not inherit it)."""
    _import_everything()
    codes: dict[str, list[str]] = {}
    classes: list[type[HelixError]] = [HelixError, *_subclasses(HelixError)]
    for cls in classes:
        if cls.__module__.split(".")[0] not in PACKAGES:
            continue  # a test's own error class
        if "code" in vars(cls) and not isinstance(vars(cls)["code"], RunErrorCode):
            codes.setdefault(vars(cls)["code"], []).append(f"{cls.__module__}.{cls.__qualname__}")
    return codes


def documented(section: str) -> list[str]:
    text = DOC.read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", text, re.M)


def test_every_error_code_is_defined_once_in_upper_snake() -> None:
    codes = defined_codes()
    assert {code: where for code, where in codes.items() if len(where) > 1} == {}
    assert [code for code in codes if not re.fullmatch(r"[A-Z]+(_[A-Z]+)*", code)] == []


def test_every_error_class_lives_in_its_packages_exceptions_module() -> None:
    _import_everything()
    homes = {cls.__module__ for cls in _subclasses(HelixError) if cls.__module__.split(".")[0] in PACKAGES}
    assert homes <= {f"{package}.exceptions" for package in PACKAGES}


def test_run_error_codes_are_defined_once_in_lower_snake() -> None:
    values = [code.value for code in RunErrorCode]
    assert len(values) == len(set(values))
    assert [v for v in values if not re.fullmatch(r"[a-z]+(_[a-z]+)*", v)] == []


@pytest.mark.parametrize("section", ["Error codes", "Run error codes"])
def test_the_documentation_lists_each_code_once(section: str) -> None:
    listed = documented(section)
    assert len(listed) == len(set(listed))
    expected = set(defined_codes()) if section == "Error codes" else {code.value for code in RunErrorCode}
    assert set(listed) == expected
