"""The one resolver of a session's model, and what a header records of it."""

from __future__ import annotations

from tether.masking import without_credentials
from tether.session.model import ModelChoice, ModelTracker, header_labels


def test_a_recorded_base_url_never_holds_its_credentials() -> None:
    labels = header_labels(ModelChoice("openai-compatible:m", "http://alice:pw@127.0.0.1:9/v1"))
    assert labels == {"model": "openai-compatible:m", "base_url": "http://127.0.0.1:9/v1"}


def test_a_url_without_credentials_is_recorded_as_it_is() -> None:
    assert without_credentials("https://example.test/v1?a=b@c") == "https://example.test/v1?a=b@c"
    assert without_credentials("http://u@h:1/v1") == "http://h:1/v1"


def test_a_model_switch_drops_the_base_url_of_the_model_before() -> None:
    start = ModelChoice("openai-compatible:m", "http://h/v1")
    assert start.switched("model", "anthropic:x") == ModelChoice("anthropic:x")
    assert start.switched("base_url", "http://g/v1") == ModelChoice(
        "openai-compatible:m", "http://g/v1"
    )
    assert ModelTracker(start).current == start
