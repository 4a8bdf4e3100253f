"""Helix streams: the chunk protocol, the stream store and SSE primitives.

This package is the leaf of the project: it imports nothing else of it. Producers write chunks
through a :class:`~streams.backends.StreamManager` (``streams.backends.get_stream_manager()``);
readers tail them, resumable from any sequence.
"""
