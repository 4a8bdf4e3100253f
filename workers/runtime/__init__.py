"""The agent runtime: no Django request and no Celery in here.

``agents`` declares agents and tools; ``steps`` runs them, one step at a time, with a module per
part of a step: ``model_stream`` (the model call), ``tools`` (tool calls, seeing a ``context``),
``subagents``, ``pauses`` (waiting on people), ``commits``. ``writer`` emits chunks, ``state``
handles the agent's JSON state, ``persistence`` is what the runtime needs of a database.
"""
