"""The shop's support desk, with the model names Helix uses too, under the app label ``chat``."""

from django.conf import settings
from django.db import models


class ChatSession(models.Model):
    customer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    subject = models.CharField(max_length=200)
    opened = models.DateTimeField(auto_now_add=True)


class Message(models.Model):
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="messages")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    body = models.TextField()
    sent = models.DateTimeField(auto_now_add=True)
