"""A local HTTP receiver standing in for Mailgun and webhook endpoints (127.0.0.1 only)."""

import json
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """Records each POST and answers it (`status`, `body`). A test that needs a slow endpoint
    clears `open` and sets it when it wants the held answers to go out."""

    def __init__(self, *, status: int = 200, body: dict | None = None):
        self.requests: list[dict] = []
        self.status, self.body = status, body or {"message": "Queued"}
        self.open = threading.Event()
        self.open.set()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                received = time.time()
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.open.wait(timeout=60)  # a test that forgot to open it fails, not hangs
                payload = raw.decode()
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    parsed = json.loads(payload)
                else:
                    parsed = {k: v[0] for k, v in urllib.parse.parse_qs(payload).items()}
                # Recorded before the answer goes out: the sender may look as soon as it has it.
                receiver.requests.append(
                    {
                        "path": self.path,
                        "auth": self.headers.get("Authorization"),
                        "data": parsed,
                        "received": received,
                        "answered": time.time(),
                    }
                )
                body = json.dumps(receiver.body).encode()
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.open.set()
        self.server.shutdown()
        self.server.server_close()
