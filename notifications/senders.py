"""Outgoing HTTP for notifications: Mailgun and webhooks (`requests`, short timeouts).

Nothing here raises for a failed delivery except `mailgun_send`, whose caller decides (the test
email reports it; background sends log it). Logs never contain the API key.
"""

import logging

import requests

from core import config

log = logging.getLogger(__name__)
TIMEOUT_SECONDS = 10
MAILGUN_HOSTS = {"us": "https://api.mailgun.net", "eu": "https://api.eu.mailgun.net"}


class DeliveryFailed(Exception):
    pass


def mailgun_base_url(region: str) -> str:
    # MALAMAR_MAILGUN_BASE_URL points tests (or a proxy) at another host.
    return config.read("mailgun_base_url") or MAILGUN_HOSTS.get(region, MAILGUN_HOSTS["us"])


def mailgun_send(settings: dict, *, subject: str, text: str) -> None:
    url = f"{mailgun_base_url(settings.get('mailgun_region', 'us'))}/v3/"
    url += f"{settings['mailgun_domain']}/messages"
    try:
        response = requests.post(
            url,
            auth=("api", settings["mailgun_api_key"]),
            data={
                "from": settings["mailgun_from_email"],
                "to": settings["mailgun_to_email"],
                "subject": subject,
                "text": text,
            },
            timeout=TIMEOUT_SECONDS,
        )
    except requests.RequestException as exc:
        raise DeliveryFailed(f"could not reach Mailgun ({type(exc).__name__})") from None
    if response.status_code >= 300:
        detail = _mailgun_message(response)
        raise DeliveryFailed(f"HTTP {response.status_code}: {detail}")


def _mailgun_message(response) -> str:
    try:
        body = response.json()
        if isinstance(body, dict) and body.get("message"):
            return str(body["message"])[:300]
    except ValueError:
        pass
    return (response.text or response.reason or "").strip()[:300]


def webhook_post(url: str, payload: dict) -> None:
    try:
        response = requests.post(url, json=payload, timeout=TIMEOUT_SECONDS)
    except requests.RequestException as exc:
        raise DeliveryFailed(f"could not reach {url} ({type(exc).__name__})") from None
    if response.status_code >= 300:
        raise DeliveryFailed(f"{url} answered HTTP {response.status_code}")
