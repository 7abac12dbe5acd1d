import pytest

from core.errors import ValidationFailed
from core.settings_store import mask, settings_get, settings_public, settings_update

KEY = "key-0123456789abcdef"


def test_defaults(db):
    values = settings_get()
    assert values["notify_on_error"] is True
    assert set(values["cli_settings"]) == {"claude", "gemini", "codex", "opencode"}
    assert values["cli_settings"]["codex"] == {"binary_path": "", "env": {}}


def test_secrets_are_masked_in_public_view(db):
    settings_update(
        changes={
            "mailgun_api_key": KEY,
            "cli_settings": {"claude": {"env": {"ANTHROPIC_API_KEY": "sk-ant-0123456789"}}},
        }
    )
    public = settings_public()
    assert KEY not in str(public)
    assert "sk-ant-0123456789" not in str(public)
    assert public["mailgun_api_key"] == mask(KEY)
    assert settings_get()["mailgun_api_key"] == KEY


def test_saving_the_mask_back_keeps_the_secret(db):
    settings_update(
        changes={
            "mailgun_api_key": KEY,
            "cli_settings": {"codex": {"env": {"CODEX_API_KEY": "sk-secret-value-1"}}},
        }
    )
    settings_update(changes=settings_public())
    stored = settings_get()
    assert stored["mailgun_api_key"] == KEY
    assert stored["cli_settings"]["codex"]["env"]["CODEX_API_KEY"] == "sk-secret-value-1"


def test_env_merge_per_key_and_null_deletes(db):
    settings_update(changes={"cli_settings": {"gemini": {"env": {"A": "1", "B": "2"}}}})
    settings_update(changes={"cli_settings": {"gemini": {"env": {"A": None, "C": "3"}}}})
    assert settings_get()["cli_settings"]["gemini"]["env"] == {"B": "2", "C": "3"}


def test_omitted_cli_keeps_its_settings(db):
    settings_update(changes={"cli_settings": {"claude": {"binary_path": "/opt/claude"}}})
    settings_update(changes={"cli_settings": {"gemini": {"binary_path": "/opt/gemini"}}})
    clis = settings_get()["cli_settings"]
    assert clis["claude"]["binary_path"] == "/opt/claude"
    assert clis["gemini"]["binary_path"] == "/opt/gemini"


@pytest.mark.parametrize(
    "changes",
    [
        {"unknown_key": 1},
        {"notify_on_error": "yes"},
        {"cli_settings": {"cursor": {}}},
        {"cli_settings": {"claude": {"env": {"BAD=NAME": "x"}}}},
        {"cli_settings": {"claude": {"env": {"OK": 5}}}},
        {"cli_settings": {"claude": {"flags": "--x"}}},
        {"mailgun_domain": 12},
    ],
)
def test_bad_settings_are_refused(db, changes):
    with pytest.raises(ValidationFailed):
        settings_update(changes=changes)
