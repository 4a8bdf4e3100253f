"""The fixtures both host projects use (:mod:`tests.host.project`)."""

from tests.host.project import database, venv, wheel

__all__ = ["database", "venv", "wheel"]
