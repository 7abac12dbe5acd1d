"""/api/docs is served from local files and runs under the strict CSP (no inline script, no
CDN); tests/browser/test_api_docs_ui.py checks it renders in a real browser."""

from html.parser import HTMLParser

from django.test import Client


class _Assets(HTMLParser):
    def __init__(self):
        super().__init__()
        self.scripts: list[dict] = []
        self.links: list[str] = []
        self._in_script: dict | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "script":
            self._in_script = {**attrs, "body": ""}
            self.scripts.append(self._in_script)
        elif tag == "link":
            self.links.append(attrs.get("href", ""))

    def handle_data(self, data):
        if self._in_script is not None:
            self._in_script["body"] += data

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = None


def test_api_docs_load_local_assets_and_no_inline_script(db):
    response = Client().get("/api/docs")
    assert response.status_code == 200
    assets = _Assets()
    assets.feed(response.content.decode())
    sources = [s["src"] for s in assets.scripts if s.get("src")]
    assert any(src.endswith("swagger-ui-bundle.js") for src in sources)
    assert any(src.endswith("swagger-ui-init.js") for src in sources)
    for script in assets.scripts:
        if not script.get("src"):  # only data, never run: the CSP has no 'unsafe-inline'
            assert script.get("type") == "application/json", script
    for url in [*sources, *assets.links]:
        assert url.startswith("/static/"), url
        assert Client().get(url).status_code == 200, url
    assert "validator.swagger.io" not in response.content.decode()
