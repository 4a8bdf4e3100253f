from celery import shared_task

from shop.users.models import User


@shared_task()
def count_users() -> int:
    """One of the shop's own tasks: it runs on the shop's default queue."""
    return User.objects.count()
