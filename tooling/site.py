"""The demo site set up in a script's own process (a benchmark's or a test's driver), as
``manage.py`` would: its settings, a database and Redis, migrated."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django(database: Path | str, redis_url: str) -> None:
    """Django on ``database`` (a SQLite file, or a database URL) and Redis, migrated."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="helix_site.settings",
        DATABASE_URL=database if isinstance(database, str) else f"sqlite:///{database}",
        REDIS_URL=redis_url,
        HELIX_STREAM_BACKEND="redis",
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, check=True)
    import django

    django.setup()
