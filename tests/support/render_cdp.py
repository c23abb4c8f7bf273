"""A minimal Chrome DevTools Protocol client on the standard library (Playwright is not installed).

    with HeadlessChromium() as browser:
        page = browser.open("file:///tmp/report.html")
        page.evaluate("document.title")
        page.requests, page.console_errors, page.screenshot("/tmp/x.png")

Starts `chromium --headless --remote-debugging-port=0`, reads the DevTools address from stderr, talks
to the page target over a hand-written WebSocket (RFC 6455, client frames masked). Every wait has a
deadline, so a broken browser fails the test instead of hanging it.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    def __init__(self, url: str, timeout: float):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", url)
        if not m:
            raise ValueError(f"not a ws:// url: {url}")
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise ConnectionError(f"WebSocket handshake failed: {status!r}")
        self.buf = head.split(b"\r\n\r\n", 1)[1]

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send(self, text: str) -> None:
        payload = text.encode()
        header = bytearray([0x81])
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 1 << 16:
            header.append(0x80 | 126)
            header += struct.pack(">H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes(header) + mask + masked)

    def recv(self) -> str:
        parts: list[bytes] = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0x9, 0xA):  # ping / pong: ignore
                continue
            parts.append(data)
            if b0 & 0x80:
                return b"".join(parts).decode()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Page:
    def __init__(self, ws: WebSocket, deadline: float):
        self.ws = ws
        self.deadline = deadline
        self.next_id = 0
        self.events: list[dict] = []

    def _remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("headless Chromium did not answer in time")
        return left

    def call(self, method: str, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            self.ws.sock.settimeout(self._remaining())
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, method: str, timeout: float = 20.0) -> dict:
        for ev in self.events:
            if ev["method"] == method:
                return ev
        end = min(self.deadline, time.monotonic() + timeout)
        while True:
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {method} event within {timeout} s")
            self.ws.sock.settimeout(left)
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return msg

    def settle(self, seconds: float = 0.3) -> None:
        """Collect events for a short while (late console messages, requests)."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.ws.sock.settimeout(left)
            try:
                msg = json.loads(self.ws.recv())
            except TimeoutError:
                break
            if "method" in msg:
                self.events.append(msg)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: str | Path, full_page: bool = True) -> Path:
        params: dict = {"format": "png"}
        if full_page:
            metrics = self.call("Page.getLayoutMetrics")
            size = metrics.get("cssContentSize") or metrics.get("contentSize")
            params["clip"] = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 12000), "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.call("Page.captureScreenshot", **params)["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    # ---- what the page did
    @property
    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    @property
    def console_errors(self) -> list[str]:
        out = []
        for e in self.events:
            p = e["params"]
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                out.append("exception: " + json.dumps(p.get("exceptionDetails", {}))[:500])
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(f"log ({p['entry'].get('source')}): {p['entry'].get('text')}")
        return out

    @property
    def dialogs(self) -> list[str]:
        return [e["params"].get("message", "") for e in self.events if e["method"] == "Page.javascriptDialogOpening"]


class HeadlessChromium:
    def __init__(self, binary: str | None = None, timeout: float = 60.0, window: tuple[int, int] = (1300, 900)):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise FileNotFoundError("chromium is not on PATH")
        self.timeout = timeout
        self.window = window
        self.proc: subprocess.Popen | None = None
        self.stderr_lines: list[str] = []
        self.profile = tempfile.mkdtemp(prefix="dynascope-chromium-")
        self.sockets: list[WebSocket] = []

    def __enter__(self) -> HeadlessChromium:
        self.deadline = time.monotonic() + self.timeout
        cmd = [
            self.binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={self.profile}",
            f"--window-size={self.window[0]},{self.window[1]}",
            "--remote-debugging-port=0",
            "--remote-allow-origins=*",
            "about:blank",
        ]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
        found = threading.Event()
        self.ws_url = None

        def pump() -> None:
            assert self.proc and self.proc.stderr
            for line in self.proc.stderr:
                self.stderr_lines.append(line.rstrip())
                m = re.search(r"DevTools listening on (ws://\S+)", line)
                if m and not found.is_set():
                    self.ws_url = m.group(1)
                    found.set()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        if not found.wait(timeout=30) or not self.ws_url:
            self.__exit__(None, None, None)
            raise RuntimeError("chromium did not print its DevTools address:\n" + "\n".join(self.stderr_lines[-20:]))
        m = re.match(r"ws://([^/]+)/", self.ws_url)
        self.http = f"http://{m.group(1)}"
        return self

    def open(self, url: str) -> Page:
        with urllib.request.urlopen(f"{self.http}/json/list", timeout=10) as resp:
            targets = json.load(resp)
        target = next(t for t in targets if t.get("type") == "page")
        ws = WebSocket(target["webSocketDebuggerUrl"], timeout=20)
        self.sockets.append(ws)
        page = Page(ws, self.deadline)
        for domain in ("Page", "Runtime", "Log", "Network"):
            page.call(f"{domain}.enable")
        page.call("Page.navigate", url=url)
        page.wait_for("Page.loadEventFired")
        page.settle(0.5)
        return page

    def __exit__(self, *exc) -> None:
        for ws in self.sockets:
            ws.close()
        if self.proc is not None:
            # chromium was started in its own session: end its whole process group (renderers, zygote).
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.proc.pid, sig)
                except (ProcessLookupError, PermissionError):
                    break
                try:
                    self.proc.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
        shutil.rmtree(self.profile, ignore_errors=True)
