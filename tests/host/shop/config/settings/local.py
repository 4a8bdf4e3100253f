from .base import *  # noqa: F403

DEBUG = True
SECRET_KEY = "local-only-not-a-secret"
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
