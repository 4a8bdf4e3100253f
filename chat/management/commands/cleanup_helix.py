"""``manage.py cleanup_helix``: remove old sessions and the streams no session needs any more."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from chat.models import ChatSession, Run
from streams.backends import InMemoryStreamManager, get_stream_manager


class Command(BaseCommand):
    help = "Delete sessions idle for longer than --days (and their streams); sweep expired in-memory streams."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=30, help="delete sessions not updated for this many days")
        parser.add_argument("--dry-run", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        cutoff = timezone.now() - timedelta(days=options["days"])
        old = ChatSession.objects.filter(updated_at__lt=cutoff).exclude(runs__status__in=Run.ACTIVE)
        ids = [str(pk) for pk in old.values_list("pk", flat=True)]
        if options["dry_run"]:
            self.stdout.write(f"Would delete {len(ids)} sessions idle since {cutoff:%Y-%m-%d}")
            return
        manager = get_stream_manager()
        # Their streams go with them (chat.state.cascade).
        deleted = ChatSession.objects.filter(pk__in=ids).delete()[1].get("helix_chat.ChatSession", 0)
        swept = manager.cleanup() if isinstance(manager, InMemoryStreamManager) else 0
        self.stdout.write(
            f"Deleted {deleted} sessions idle since {cutoff:%Y-%m-%d} and their streams; swept {swept} expired streams"
        )
