"""``manage.py reap_runs``: hand runs whose worker died to a live worker (once, or in a loop)."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from chat.state.recovery import reap_expired_runs
from streams.conf import helix_settings


class Command(BaseCommand):
    help = (
        "Send runs whose lease expired to a live Celery worker, and fail those out of attempts. "
        "Celery beat does the same (helix.reap_runs); use this where beat does not run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--loop", action="store_true", help="keep reaping every REAP_INTERVAL_SECONDS")

    def handle(self, *args: Any, **options: Any) -> None:
        while True:
            report = reap_expired_runs()
            if report.dispatched or report.failed or report.closed or report.expired or not options["loop"]:
                self.stdout.write(
                    f"Sent {report.dispatched} runs to a worker, failed {report.failed}, closed {report.closed}; "
                    f"{report.expired} paused tool calls expired"
                )
            if not options["loop"]:
                return
            time.sleep(float(helix_settings.REAP_INTERVAL_SECONDS))
