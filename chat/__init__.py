"""Helix chat: the HTTP edge (views, SSE out), persistence and admin."""
