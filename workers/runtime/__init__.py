"""The agent runtime: agents, tools, the step loop. No Django request and no Celery in here."""
