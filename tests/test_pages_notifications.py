"""Settings → Notifications: save Mailgun and webhooks, keep the masked key, test email."""

import json

import pytest
from django.test import Client

from core.settings_store import settings_get, settings_update
from notifications import services
from notifications.senders import DeliveryFailed
from tests.htmltree import parse

KEY = "key-0123456789abcdef-secret"
FORM = {
    "mailgun_api_key": KEY,
    "mailgun_domain": "mg.example.com",
    "mailgun_region": "eu",
    "mailgun_from_email": "malamar@mg.example.com",
    "mailgun_to_email": "me@example.com",
    "notify_on_error": "on",
    "webhook_urls": "https://ntfy.sh/my-topic\nhttp://127.0.0.1:9000/hook",
    "stall_warning_minutes": "20",
}


@pytest.fixture
def client(db):
    return Client(HTTP_HX_REQUEST="true")


def toast(response) -> dict:
    return json.loads(response["HX-Trigger"])["malamar:toast"]


def test_section_renders_with_the_key_masked(client):
    settings_update(changes={"mailgun_api_key": KEY})
    page = Client().get("/settings/").content.decode()
    assert KEY not in page  # nowhere in the page
    tree = parse(page)
    assert tree.by_id("notify-heading").text == "Notifications"
    form = tree.by_id("notification-settings")
    assert form.find(tag="input", name="mailgun_api_key").attrs["value"] == "••••cret"
    assert form.find(tag="button", text="Send test email") is not None
    assert form.find(tag="button", data_browser_notifications="") is not None
    scripts = [script.attrs.get("src", "") for script in tree.find_all(tag="script")]
    assert any(src.endswith("js/notify.js") for src in scripts)


def test_save_then_save_the_mask_back(client):
    response = client.post("/settings/notifications/", FORM)
    assert response.status_code == 200 and toast(response)["level"] == "success"
    stored = settings_get()
    assert stored["mailgun_api_key"] == KEY and stored["mailgun_region"] == "eu"
    assert stored["webhook_urls"] == ["https://ntfy.sh/my-topic", "http://127.0.0.1:9000/hook"]
    assert stored["notify_on_error"] is True and stored["notify_on_in_review"] is False
    assert stored["stall_warning_minutes"] == 20
    client.post("/settings/notifications/", {**FORM, "mailgun_api_key": "••••cret"})
    assert settings_get()["mailgun_api_key"] == KEY


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("mailgun_to_email", "not-an-email", "valid email"),
        ("webhook_urls", "ftp://nope", "not an http(s) URL"),
        ("stall_warning_minutes", "0", "Enter a number of minutes above 0"),
    ],
)
def test_errors_are_shown_on_the_form(client, field, value, needle):
    response = client.post("/settings/notifications/", {**FORM, field: value})
    assert needle in response.content.decode()
    assert settings_get()["mailgun_domain"] == ""


def test_test_email_success_and_failure_toasts(client, monkeypatch):
    settings_update(changes={k: v for k, v in FORM.items() if k.startswith("mailgun_")})
    sent = []
    monkeypatch.setattr(services, "mailgun_send", lambda values, **kw: sent.append(kw))
    ok = client.post("/settings/notifications/test/")
    assert ok.status_code == 204 and toast(ok)["message"] == "Test email sent"
    assert sent[0]["subject"] == "Malamar Test Email"

    def fail(values, **kw):
        raise DeliveryFailed("HTTP 401: Invalid private key")

    monkeypatch.setattr(services, "mailgun_send", fail)
    bad = toast(client.post("/settings/notifications/test/"))
    assert bad["level"] == "error" and "Invalid private key" in bad["detail"]


def test_test_email_without_settings_says_what_is_missing(client):
    note = toast(client.post("/settings/notifications/test/"))
    assert note["level"] == "error" and "mailgun_api_key" in note["detail"]


def test_the_silent_run_minutes_show_as_a_person_writes_them(client):
    """Shown as 20, not 20.0, after a save (as the workspace settings already did)."""
    response = client.post("/settings/notifications/", FORM)
    for page in (response, Client().get("/settings/")):
        field = parse(page.content.decode()).find(tag="input", name="stall_warning_minutes")
        assert field.attrs["value"] == "20"
    client.post("/settings/notifications/", {**FORM, "stall_warning_minutes": "2.5"})
    assert 'value="2.5"' in Client().get("/settings/").content.decode()
