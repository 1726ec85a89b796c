"""The one resolver of a session's model, and what a header records of it."""

from __future__ import annotations

from tests.session.builders import FakeClock, new_session
from tether.loop.history import History
from tether.masking import without_credentials
from tether.session.log import Session, SessionHeader
from tether.session.model import (
    FALLBACK_MODEL,
    ModelChoice,
    ModelTracker,
    header_labels,
    session_model,
)
from tether.session.settings import ConfigChanged


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


def test_the_resolver_answers_at_any_seq_from_the_header_the_configuration_and_the_log() -> None:
    labelled = Session(
        SessionHeader("s-1", 1.0, "/w", meta=header_labels(ModelChoice("deepseek:a", "http://h"))),
        clock=FakeClock(),
    )
    labelled.append(ConfigChanged(option="model", value="anthropic:b"))
    labelled.append(ConfigChanged(option="base_url", value="http://g"))
    assert session_model(labelled, at=0) == ModelChoice("deepseek:a", "http://h")
    assert session_model(labelled, at=1) == ModelChoice("anthropic:b")
    assert session_model(labelled) == ModelChoice("anthropic:b", "http://g")
    # The configuration's model counts only for a header that names none.
    assert session_model(labelled, configured="openai:c", at=0).model == "deepseek:a"
    bare = new_session()
    assert session_model(bare, configured="openai:c") == ModelChoice("openai:c")
    assert session_model(bare) == ModelChoice(FALLBACK_MODEL)


def test_the_loops_history_folds_the_same_rule_incrementally() -> None:
    session = new_session()
    history = History(session, ModelChoice("deepseek:a"))
    assert history.model() == "deepseek:a"
    session.append(ConfigChanged(option="model", value="anthropic:b"))
    assert history.model() == session_model(session).model == "anthropic:b"
    assert History(new_session()).model() == FALLBACK_MODEL
