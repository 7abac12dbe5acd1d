import pytest

from core.errors import ValidationFailed
from core.settings_store import (
    SettingsInvalid,
    mask,
    settings_get,
    settings_public,
    settings_update,
)
from tests.stack import FAKES_BIN

KEY = "key-0123456789abcdef"


@pytest.mark.pg
def test_defaults(db):
    values = settings_get()
    assert values["notify_on_error"] is True
    assert set(values["cli_settings"]) == {"claude", "gemini", "codex", "opencode"}
    assert values["cli_settings"]["codex"] == {
        "binary_path": "",
        "env": {},
        "health_timeout_seconds": 90,
    }


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


@pytest.mark.pg
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


@pytest.mark.pg
def test_env_merge_per_key_and_null_deletes(db):
    settings_update(changes={"cli_settings": {"gemini": {"env": {"A": "1", "B": "2"}}}})
    settings_update(changes={"cli_settings": {"gemini": {"env": {"A": None, "C": "3"}}}})
    assert settings_get()["cli_settings"]["gemini"]["env"] == {"B": "2", "C": "3"}


@pytest.mark.pg
def test_omitted_cli_keeps_its_settings(db):
    claude, gemini = str(FAKES_BIN / "claude"), str(FAKES_BIN / "gemini")
    settings_update(changes={"cli_settings": {"claude": {"binary_path": claude}}})
    settings_update(changes={"cli_settings": {"gemini": {"binary_path": gemini}}})
    clis = settings_get()["cli_settings"]
    assert clis["claude"]["binary_path"] == claude
    assert clis["gemini"]["binary_path"] == gemini


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


@pytest.mark.pg
@pytest.mark.parametrize(
    ("changes", "field", "needle"),
    [
        ({"mailgun_from_email": "not-an-email"}, "mailgun_from_email", "not a valid email"),
        ({"mailgun_to_email": "me@"}, "mailgun_to_email", "not a valid email"),
        ({"webhook_urls": ["https://"]}, "webhook_urls", "has no host name"),
        ({"webhook_urls": "https://ok.example\nhttp:///hook"}, "webhook_urls", "no host name"),
        ({"webhook_urls": ["http://[::1/x"]}, "webhook_urls", "not a valid URL"),
        ({"knowledge_base_url": "https://"}, "knowledge_base_url", "has no host name"),
        ({"stall_warning_minutes": float("nan")}, "stall_warning_minutes", "above 0"),
        ({"stall_warning_minutes": float("inf")}, "stall_warning_minutes", "above 0"),
        (
            {"cli_settings": {"claude": {"env": {"BAD NAME": "x"}}}},
            "cli_settings.claude.env",
            "“BAD NAME” is not a valid name",
        ),
        (
            {"cli_settings": {"codex": {"env": {"OK": "a\0b"}}}},
            "cli_settings.codex.env.OK",
            "NUL character",
        ),
    ],
)
def test_invalid_values_are_refused_and_nothing_is_stored(db, changes, field, needle):
    with pytest.raises(SettingsInvalid) as err:
        settings_update(changes={"mailgun_domain": "mg.example.com", **changes})
    assert list(err.value.errors) == [field] and needle in err.value.errors[field]
    assert err.value.message.startswith(f"{field}: ")  # the API's message names the field
    assert settings_get()["mailgun_domain"] == ""  # the valid change was not stored either


def test_every_invalid_field_is_reported_at_once(db):
    with pytest.raises(SettingsInvalid) as err:
        settings_update(changes={"mailgun_from_email": "a@", "mailgun_to_email": "b"})
    assert set(err.value.errors) == {"mailgun_from_email", "mailgun_to_email"}
    assert "mailgun_from_email: " in err.value.message and "mailgun_to_email: " in err.value.message


@pytest.mark.pg
def test_valid_addresses_and_urls_are_stored(db):
    settings_update(
        changes={
            "mailgun_from_email": " malamar@mg.example.com ",
            "webhook_urls": ["https://ntfy.sh/topic", "http://127.0.0.1:9000/hook"],
            "knowledge_base_url": "https://docs.example.com/kb",
        }
    )
    stored = settings_get()
    assert stored["mailgun_from_email"] == "malamar@mg.example.com"
    assert stored["webhook_urls"] == ["https://ntfy.sh/topic", "http://127.0.0.1:9000/hook"]


def test_binary_path_must_exist_be_a_file_and_be_executable(db, tmp_path):
    plain = tmp_path / "claude"
    plain.write_text("#!/bin/sh\n")
    cases = {
        str(tmp_path / "missing"): "does not exist",
        str(tmp_path): "is not a file",
        str(plain): "is not executable",
        "bin/claude": "is not an absolute path",
    }
    for path, needle in cases.items():
        with pytest.raises(SettingsInvalid) as err:
            settings_update(changes={"cli_settings": {"claude": {"binary_path": path}}})
        assert list(err.value.errors) == ["cli_settings.claude.binary_path"]
        assert err.value.errors["cli_settings.claude.binary_path"].startswith(f"{path} {needle}")
        assert settings_get()["cli_settings"]["claude"]["binary_path"] == ""
    plain.chmod(0o755)
    settings_update(changes={"cli_settings": {"claude": {"binary_path": str(plain)}}})
    assert settings_get()["cli_settings"]["claude"]["binary_path"] == str(plain)
