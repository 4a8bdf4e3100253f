"""The AI SDK bridge: stored Helix chunks and messages → what an AI SDK v6 ``useChat`` receives.

Pure code: no Django request, no network I/O beyond the store interfaces it is handed.
"""
