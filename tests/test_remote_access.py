"""Remote use: extra allowed hosts, optional password (sessions and API tokens), rate limit,
security headers, and refusing to serve other machines without a password."""

import dataclasses
import re
import signal
import subprocess
import sys

import pytest
import requests
from django.test import Client

from core.auth import login_limiter, password_set, token_create, token_revoke
from tests.htmltree import parse
from tests.live import FIRST_START, ROOT, django_script, free_port, manage, process_env, wait_until
from tests.stack import data_dir_from

PASSWORD = "correct horse battery"


@pytest.fixture(autouse=True)
def fresh_rate_limit():
    """The limiter lives in the process: each test starts with no recorded attempts."""
    login_limiter.attempts.clear()
    login_limiter.reported.clear()
    yield
    login_limiter.attempts.clear()
    login_limiter.reported.clear()


@pytest.fixture
def protected(db):
    password_set(raw=PASSWORD)
    return Client()


def signed_in(client: Client) -> Client:
    response = client.post("/login/", {"password": PASSWORD, "next": "/"})
    assert response.status_code == 302
    return client


def api_get_paths(workspace_id: str) -> list[str]:
    """Every GET route of the JSON API, with ids filled in."""
    from malamar_site.api import api

    paths = []
    for route, _ in api.get_openapi_schema()["paths"].items():
        paths.append(re.sub(r"\{[a-z_]+\}", workspace_id, route))
    return paths


PAGES = ["/", "/settings/"]


def test_every_page_api_route_and_the_event_stream_need_a_login(protected, workspace):
    for path in [*PAGES, f"/workspaces/{workspace.id}/"]:
        response = protected.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), path
    for path in [*api_get_paths(workspace.id), "/api/events"]:
        response = protected.get(path)
        assert response.status_code == 401, path
        assert response.json()["error"]["code"] == "UNAUTHORIZED"
    assert protected.post("/api/workspaces", "{}", content_type="application/json").status_code == (
        401
    )


def test_the_api_docs_page_sends_a_browser_to_the_login_page(protected):
    response = protected.get("/api/docs")
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/api/docs"
    assert signed_in(protected).get("/api/docs").status_code == 200
    # its schema stays an API route: a JSON refusal without a session
    assert Client().get("/api/openapi.json").status_code == 401


def test_signing_in_opens_everything(protected, workspace):
    client = signed_in(protected)
    assert client.get("/").status_code == 200
    assert client.get(f"/api/workspaces/{workspace.id}").status_code == 200
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_wrong_password_and_open_redirects(protected):
    assert protected.post("/login/", {"password": "nope"}).status_code == 401
    response = protected.post("/login/", {"password": PASSWORD, "next": "https://evil.example/"})
    assert response["Location"] == "/"


def test_remember_me_sets_a_lasting_session(protected):
    protected.post("/login/", {"password": PASSWORD, "remember": "on"})
    assert protected.session.get_expiry_age() == 30 * 24 * 3600
    other = Client()
    other.post("/login/", {"password": PASSWORD})
    assert other.session.get_expire_at_browser_close()


def test_api_tokens(protected, workspace):
    token, raw = token_create(name="phone script")
    assert raw.startswith("mlm_") and raw not in (token.token_hash, token.prefix)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/workspaces").status_code == 200
    assert Client(HTTP_AUTHORIZATION="Bearer mlm_wrong").get("/api/workspaces").status_code == 401
    token_revoke(token_id=token.id)
    assert client.get("/api/workspaces").status_code == 401


def test_login_attempts_are_rate_limited_and_logged_without_the_password(protected, caplog):
    for _ in range(10):
        assert protected.post("/login/", {"password": "guess-wrong"}).status_code == 401
    limited = protected.post("/login/", {"password": PASSWORD})
    assert limited.status_code == 429
    assert "guess-wrong" not in caplog.text and PASSWORD not in caplog.text


def test_no_password_means_no_login(db, workspace):
    assert Client().get("/").status_code == 200
    assert Client().get("/login/").status_code == 302


def test_security_headers(db):
    for path in ("/", "/api/workspaces", "/settings/"):
        response = Client().get(path)
        policy = response["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "'unsafe-inline'" not in policy
        assert "'unsafe-eval'" not in policy and "frame-ancestors 'none'" in policy
        assert response["X-Frame-Options"] == "DENY"
        assert response["Referrer-Policy"] == "same-origin"


def test_allowed_hosts_come_from_the_setting(tmp_path):
    code = (
        "from django.conf import settings; "
        "print(settings.ALLOWED_HOSTS, settings.CSRF_TRUSTED_ORIGINS)"
    )
    before = django_script(tmp_path, code).stdout
    assert "box.tail1234.ts.net" not in before
    after = django_script(
        tmp_path, code, MALAMAR_ALLOWED_HOSTS="box.tail1234.ts.net, .example.net"
    ).stdout
    assert "'box.tail1234.ts.net'" in after and "'.example.net'" in after
    assert "https://box.tail1234.ts.net" in after and "https://*.example.net" in after


def test_config_and_doctor_show_the_hosts_and_the_access_mode(tmp_path, template_db):
    data_dir_from(template_db, tmp_path)  # migrated (the session's template)
    env = {"MALAMAR_ALLOWED_HOSTS": "box.tail1234.ts.net"}
    assert "box.tail1234.ts.net" in manage(tmp_path, "config", **env).stdout
    doctor = manage(tmp_path, "doctor", **env).stdout
    assert "✗ Access: local only (no password)" in doctor
    assert (
        "✓ Access: remote WITHOUT a password"
        in manage(tmp_path, "doctor", MALAMAR_NO_AUTH="1", **env).stdout
    )


def run_malamar(tmp_path, *args, **env):
    return subprocess.Popen(
        [sys.executable, "-m", "malamar_site.cli", *args],
        env=process_env(tmp_path, **env),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.live
def test_a_remote_host_without_password_refuses_to_start(tmp_path):
    port = free_port()
    proc = run_malamar(tmp_path, "--host", "0.0.0.0", "--port", str(port))
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "without a password" in err and "malamar set-password" in err and "--no-auth" in err
    tailscale = run_malamar(tmp_path, "--allowed-hosts", "box.tail1234.ts.net")
    tailscale.communicate(timeout=60)
    assert tailscale.returncode == 2  # a Tailscale name counts as remote, even on 127.0.0.1


@pytest.mark.live
def test_no_auth_or_a_password_lets_it_start_and_hosts_are_checked(tmp_path):
    port = free_port()
    proc = run_malamar(
        tmp_path, "--port", str(port), "--allowed-hosts", "box.tail1234.ts.net", "--no-auth"
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ok(url), timeout=FIRST_START, what="server")
        other = requests.get(f"{url}/", headers={"Host": "other.tail1234.ts.net"}, timeout=5)
        assert other.status_code == 400 and "MALAMAR_ALLOWED_HOSTS" in other.text
        named = requests.get(f"{url}/", headers={"Host": "box.tail1234.ts.net"}, timeout=5)
        assert named.status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    setter = subprocess.run(
        [sys.executable, "-m", "malamar_site.cli", "set-password"],
        input=f"{PASSWORD}\n",
        env={**process_env(tmp_path), "MALAMAR_PASSWORD_STDIN": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert setter.returncode == 0, setter.stderr
    proc = run_malamar(tmp_path, "--port", str(port), "--allowed-hosts", "box.tail1234.ts.net")
    try:
        wait_until(lambda: _answers(url), timeout=FIRST_START, what="protected server")
        assert requests.get(f"{url}/api/workspaces", timeout=5).status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)


def _ok(url: str) -> bool:
    try:
        return requests.get(f"{url}/api/health", timeout=1).ok
    except requests.RequestException:
        return False


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/api/health", timeout=1).status_code in (200, 401)
    except requests.RequestException:
        return False


def test_check_deploy_only_warns_about_https(tmp_path):
    explained = {"security.W004", "security.W008", "security.W012", "security.W016"}
    plain = set(re.findall(r"security\.W\d+", manage(tmp_path, "check", "--deploy").stderr))
    assert plain <= explained
    proxied = manage(tmp_path, "check", "--deploy", MALAMAR_TRUST_PROXY="1").stderr
    assert set(re.findall(r"security\.W\d+", proxied)) <= {"security.W004", "security.W008"}


def test_sign_out_button_only_with_a_password(db):
    assert parse(Client().get("/").content.decode()).find(tag="form", action="/logout/") is None
    password_set(raw=PASSWORD)
    client = signed_in(Client())
    sign_out = parse(client.get("/").content.decode()).find(tag="form", action="/logout/")
    assert sign_out.find(tag="button").attrs["aria-label"] == "Sign out"


def test_settings_page_creates_shows_once_and_revokes_tokens(protected):
    client = signed_in(protected)
    page = parse(client.get("/settings/").content.decode())
    access = page.find("section-head", text="Access")
    assert access.find("section-subtitle").text.startswith("Password required")
    assert page.by_id("api-tokens").find("section-title").text == "API tokens"
    created = client.post("/settings/tokens/", {"name": "phone"}, HTTP_HX_REQUEST="true")
    html = created.content.decode()
    raw = re.search(r"mlm_[A-Za-z0-9_-]{20,}", html).group(0)
    assert Client(HTTP_AUTHORIZATION=f"Bearer {raw}").get("/api/workspaces").status_code == 200
    again = client.get("/settings/").content.decode()
    assert raw not in again and "phone" in again  # shown once, listed by name and prefix
    from core.models import ApiToken

    token = ApiToken.objects.get()
    client.post(f"/settings/tokens/{token.id}/revoke/", HTTP_HX_REQUEST="true")
    assert Client(HTTP_AUTHORIZATION=f"Bearer {raw}").get("/api/workspaces").status_code == 401


def _start(tmp_path, argv, **env):
    return subprocess.Popen(
        [sys.executable, *argv],
        env=process_env(tmp_path, **env),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _refused(proc) -> str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, out + err
    assert "Refusing to start" in err and "without a password" in err, out + err
    assert "MALAMAR_NO_AUTH=1" in err and "malamar set-password" in err
    return err


def _serves(proc, port: int) -> None:
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is None and _ok(url), timeout=FIRST_START, what="the server")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)


RUNSERVER = [str(ROOT / "manage.py"), "runserver"]
DAPHNE = ["-m", "daphne"]
APP = "malamar_site.asgi:application"


@pytest.mark.live
@pytest.mark.parametrize(
    "argv",
    [
        [*RUNSERVER, "0.0.0.0:{port}"],
        [*RUNSERVER, "[::]:{port}", "--noreload"],
        [*DAPHNE, "-b", "0.0.0.0", "-p", "{port}", APP],
        [*DAPHNE, "-e", "tcp:port={port}", APP],  # no interface: every interface
    ],
    ids=["runserver-0.0.0.0", "runserver-ipv6-any", "daphne-bind", "daphne-endpoint"],
)
def test_every_way_of_starting_refuses_a_remote_address_without_password(
    tmp_path, template_db, argv
):
    data_dir_from(template_db, tmp_path)  # migrated (the session's template)
    port = free_port()
    proc = _start(tmp_path, [part.format(port=port) for part in argv])
    _refused(proc)
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/api/health", timeout=2)


@pytest.mark.live
@pytest.mark.parametrize(
    "argv",
    [[*RUNSERVER, "127.0.0.1:{port}", "--noreload"], [*DAPHNE, "-p", "{port}", APP]],
    ids=["runserver", "daphne"],
)
def test_every_way_of_starting_honours_no_auth_and_allowed_hosts(tmp_path, template_db, argv):
    """A Tailscale name makes even a loopback bind remote: refused, unless MALAMAR_NO_AUTH=1."""
    data_dir_from(template_db, tmp_path)  # migrated (the session's template)
    port = free_port()
    argv = [part.format(port=port) for part in argv]
    remote = {"MALAMAR_ALLOWED_HOSTS": "box.tail1234.ts.net"}
    assert "box.tail1234.ts.net" in _refused(_start(tmp_path, argv, **remote))
    _serves(_start(tmp_path, argv, MALAMAR_NO_AUTH="1", **remote), port)
    _serves(_start(tmp_path, argv), port)  # loopback only: no password needed


@pytest.mark.parametrize(
    ("argv", "binds"),
    [
        (["/venv/bin/daphne", APP], ["127.0.0.1"]),
        (["/x/daphne/__main__.py", "-p", "9000", APP], ["127.0.0.1"]),
        (["/venv/bin/daphne", "-b", "0.0.0.0", APP], ["0.0.0.0"]),
        (["/venv/bin/daphne", "-u", "/tmp/m.sock", APP], []),
        (["/venv/bin/daphne", "--fd", "3", APP], ["an inherited socket (fd 3)"]),
        (["/venv/bin/daphne", "-e", r"tcp:port=80:interface=\:\:1", APP], ["::1"]),
        (["/venv/bin/daphne", "-e", "tcp:80", APP], ["0.0.0.0"]),
        (["/src/manage.py", "runserver"], None),
    ],
)
def test_daphne_bind_addresses_are_read_as_daphne_reads_them(argv, binds):
    from malamar_site.startup import daphne_binds

    assert daphne_binds(argv) == binds


def test_the_refusal_follows_the_real_bind_address(db, settings):
    from core.auth import remote_access_refusal

    assert remote_access_refusal(bind="127.0.0.1") is None
    assert (
        remote_access_refusal(bind="127.0.0.2") is None
        and remote_access_refusal(bind="::1") is None
    )
    assert "0.0.0.0" in remote_access_refusal(bind="0.0.0.0")
    assert "192.168.1.5" in remote_access_refusal(bind="192.168.1.5")
    password_set(raw=PASSWORD)
    assert remote_access_refusal(bind="0.0.0.0") is None


def test_the_admin_sits_behind_malamars_login_when_a_password_is_set(protected):
    from django.contrib.auth.models import User

    User.objects.create_superuser("admin", "a@example.com", "admin-pw")
    for path in ("/admin/", "/admin/login/", "/admin/core/setting/"):
        response = protected.get(path)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), path
    refused = protected.post("/admin/login/", {"username": "admin", "password": "admin-pw"})
    assert refused.status_code == 302 and refused["Location"].startswith("/login/")
    client = signed_in(protected)
    assert client.get("/admin/login/").status_code == 200  # then the admin's own login
    client.post("/admin/login/?next=/admin/", {"username": "admin", "password": "admin-pw"})
    assert client.get("/admin/").status_code == 200


def test_no_password_the_admin_has_only_its_own_login(db):
    assert Client().get("/admin/").status_code == 302
    assert Client().get("/admin/login/").status_code == 200


@pytest.mark.parametrize("signed_in_first", [False, True])
def test_admin_login_attempts_share_the_login_rate_limit(db, caplog, signed_in_first):
    from django.contrib.auth.models import User

    User.objects.create_superuser("admin", "a@example.com", "admin-pw")
    client = Client()
    if signed_in_first:  # a password is set: through Malamar's login first
        password_set(raw=PASSWORD)
        signed_in(client)
    for _ in range(9 if signed_in_first else 10):
        wrong = client.post("/admin/login/", {"username": "admin", "password": "guess-wrong"})
        assert wrong.status_code == 200  # the admin's form, with its error
    limited = client.post("/admin/login/", {"username": "admin", "password": "admin-pw"})
    assert limited.status_code == 429
    assert "guess-wrong" not in caplog.text and "admin-pw" not in caplog.text
    if not signed_in_first:
        password_set(raw=PASSWORD)
        assert Client().post("/login/", {"password": PASSWORD}).status_code == 429  # shared


@pytest.mark.parametrize("local", ["192.168.1.5", "100.101.102.103", "fe80::1"])
def test_without_password_a_request_on_a_network_address_is_refused(db, settings, local):
    """Whatever started the server (e.g. another ASGI server on 0.0.0.0): no password, no
    answer to the network."""

    def client(server_name):  # a client that says "Host: localhost" to get past ALLOWED_HOSTS
        return Client(SERVER_NAME=server_name, HTTP_HOST="localhost")

    page = client(local).get("/")
    assert page.status_code == 403 and "MALAMAR_NO_AUTH" in page.content.decode()
    api = client(local).get("/api/workspaces")
    assert api.status_code == 403 and api.json()["error"]["code"]
    for loopback in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        assert client(loopback).get("/").status_code == 200
    settings.CONFIG = dataclasses.replace(settings.CONFIG, no_auth=True)
    assert client(local).get("/").status_code == 200
    settings.CONFIG = dataclasses.replace(settings.CONFIG, no_auth=False)
    password_set(raw=PASSWORD)
    assert signed_in(client(local)).get("/").status_code == 200


def test_a_client_hammering_the_login_logs_the_limit_once_not_per_request(protected, caplog):
    for _ in range(10):
        protected.post("/login/", {"password": "guess-wrong"})
    caplog.clear()
    for _ in range(30):
        assert protected.post("/login/", {"password": "guess-wrong"}).status_code == 429
    limited = [r for r in caplog.records if "rate limit" in r.getMessage()]
    assert len(limited) == 1, [r.getMessage() for r in caplog.records]


def test_the_rate_limiter_forgets_idle_clients():
    limiter = login_limiter.__class__(limit=2, window=60)
    limiter.PRUNE_ABOVE = 5
    for n in range(20):
        assert limiter.allow(f"10.0.0.{n}")
        limiter.attempts[f"10.0.0.{n}"] = [0.0]  # long ago
    assert limiter.allow("10.0.1.1")
    assert len(limiter.attempts) <= limiter.PRUNE_ABOVE + 1
