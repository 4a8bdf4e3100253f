"""What the host-project tests share: the wheel built from this checkout, a fresh virtualenv
with it installed as a shop would install it, a fresh PostgreSQL database per site, and the
processes' plumbing. The fixtures are exposed to both host projects by ``conftest.py``."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

HOST = Path(__file__).resolve().parent
ROOT = HOST.parent.parent
#: What the shops install beside Helix's wheel (pinned in requirements-test.txt): their OpenAPI
#: generator, and the second shop's sign-in, static files and production server.
SHOP_PACKAGES = ("drf-spectacular", "django-allauth", "whitenoise", "gunicorn", "uvicorn-worker", "uvicorn")


# -- the wheel and its virtualenv ------------------------------------------------------------------


def pinned(package: str) -> str:
    """``package[extras]==<version>`` as requirements-test.txt pins it (the shops' own tools)."""
    for line in (ROOT / "requirements-test.txt").read_text().splitlines():
        if re.match(rf"{re.escape(package)}(\[[^]]*\])?==", line, re.IGNORECASE):
            return line.strip()
    raise AssertionError(f"{package} is not pinned in requirements-test.txt")


def run(argv: list[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``argv`` to completion; fails the test with its output when it fails or overruns."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(argv)} took more than {timeout} s:\n{exc.stdout!r}\n{exc.stderr!r}")
    if result.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout, built through its sdist (as a release is), so nothing left in
    ``build/`` by an earlier build can slip in."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], timeout=300, cwd=ROOT)
    wheels = list(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@dataclass
class Venv:
    path: Path
    install_seconds: float

    def bin(self, name: str) -> str:
        return str(self.path / "bin" / name)


@pytest.fixture(scope="session")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh virtualenv with the wheel installed, its dependencies held to the pins of
    requirements.txt, or of the version set the suite runs on (``HELIX_TEST_CONSTRAINTS``, set by
    ``bin/test-versions``; constraints take no extras, so those are dropped), plus the PostgreSQL
    driver."""
    base = tmp_path_factory.mktemp("host-venv")
    constraints = base / "constraints.txt"
    pins = ROOT / os.environ.get("HELIX_TEST_CONSTRAINTS", "requirements.txt")
    constraints.write_text(re.sub(r"\[[^]]*\]", "", pins.read_text()))
    path = base / "venv"
    started = time.monotonic()
    run([sys.executable, "-m", "venv", str(path)], timeout=60)
    run(
        [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "-c", str(constraints), str(wheel), "psycopg[binary]", "daphne",
         *(pinned(package) for package in SHOP_PACKAGES)],
        timeout=300,
        cwd=base,
    )  # fmt: skip
    return Venv(path, time.monotonic() - started)


def host_env(venv: Venv, site: Path, **extra: str) -> dict[str, str]:
    """The environment of a host's processes: the host ``site`` on the path, nothing of the
    checkout, no settings module of the test run (the host's own defaults apply)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not key.startswith(("DJANGO_", "HELIX_"))
    }
    return {
        **env,
        "PATH": f"{venv.path / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(site),
        "PYTHONDONTWRITEBYTECODE": "1",  # leave no __pycache__ in the checkout
        **extra,
    }


# -- a host project's database and processes -------------------------------------------------------


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    """A fresh database on the test PostgreSQL server (``DATABASE_URL`` of bin/test), dropped after."""
    import psycopg

    url = urlparse(os.environ.get("DATABASE_URL", ""))
    if url.scheme not in ("postgres", "postgresql"):
        pytest.fail("the host-project test needs PostgreSQL in DATABASE_URL (run the tests with bin/test)")
    name = f"hostsite_{uuid.uuid4().hex[:10]}"
    server = url._replace(path="/postgres").geturl()
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=5) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
    except psycopg.Error as exc:
        pytest.fail(f"PostgreSQL at {url.hostname}:{url.port} is required (run the tests with bin/test): {exc}")
    yield url._replace(path=f"/{name}").geturl()
    with psycopg.connect(server, autocommit=True, connect_timeout=5) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def wait_until(
    ready: Callable[[], bool], process: subprocess.Popen[bytes], what: str, log: Path, timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.1)


def listening(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return False
        return True

    return check


class Processes:
    """A host's processes, each started in ``workdir`` with ``env`` and its output in a log there."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir, self.env = workdir, env
        self.started: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, argv: list[str]) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(argv, cwd=self.workdir, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        self.started.append(process)
        return process, log

    def stop_all(self) -> None:
        for process in reversed(self.started):
            stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def installed(venv: Venv, relative: str) -> Path:
    """The path of a file of the installed distribution."""
    site_packages = next(venv.path.glob("lib/python*/site-packages"))
    return site_packages / relative
