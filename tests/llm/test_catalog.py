"""The model catalog: what it knows of models the settings do not list."""

from __future__ import annotations

from tether.llm.catalog import ModelCatalog


def test_a_catalog_with_no_models_answers_from_the_defaults() -> None:
    # What a library program or a tool gets without the llm service's catalog.
    empty = ModelCatalog()
    assert empty.get("openai:gpt-4o") is None
    assert empty.accepts_images("openai:gpt-4o") is True
    assert empty.accepts_images("deepseek:deepseek-chat") is False
