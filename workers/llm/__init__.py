"""LLM adapters behind one small interface (``workers.llm.base``)."""
