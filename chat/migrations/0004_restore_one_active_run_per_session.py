from django.db import migrations, models


class Migration(migrations.Migration):
    """Migration 0003 took the session column's own index away (the new index on session and
    creation serves lookups by session). On PostgreSQL, Django dropped every index on that column
    alone but the ones the model names as indexes, and so dropped the partial unique index behind
    the one-active-run-per-session constraint too. It is made again here; where it was kept
    (SQLite rebuilds the table and all its indexes), it is dropped and made again."""

    dependencies = [
        ('helix_chat', '0003_run_latest_index'),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name='run',
            name='helix_chat_one_active_run_per_session',
        ),
        migrations.AddConstraint(
            model_name='run',
            constraint=models.UniqueConstraint(
                condition=models.Q(('status__in', ['queued', 'running', 'paused'])),
                fields=('session',),
                name='helix_chat_one_active_run_per_session',
            ),
        ),
    ]
