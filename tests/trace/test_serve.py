"""Serving one trace to ui.perfetto.dev (layerscope/trace/serve.py), over loopback only."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from layerscope.errors import TraceError
from layerscope.trace.serve import PERFETTO_UI_ORIGIN, TraceServer, open_in_perfetto

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "my trace.json"
    p.write_bytes(b'{"traceEvents":[]}')
    return p


def _get(url: str, origin: str | None = None, method: str = "GET"):
    req = urllib.request.Request(url, method=method, headers={"Origin": origin} if origin else {})
    return urllib.request.urlopen(req, timeout=5)


def test_serves_once_with_cors_for_the_ui_only(trace: Path) -> None:
    with TraceServer(trace) as srv:
        assert srv.url.startswith("http://127.0.0.1:") and srv.url.endswith("/my%20trace.json")
        assert srv.ui_url == f"https://ui.perfetto.dev/#!/?url={srv.url}"
        with pytest.raises(urllib.error.HTTPError) as exc:
            _get(srv.url, origin="https://evil.example")
        assert exc.value.code == 403 and exc.value.headers.get("Access-Control-Allow-Origin") is None
        with _get(srv.url, origin=PERFETTO_UI_ORIGIN, method="OPTIONS") as r:
            assert r.status == 204
            assert r.headers["Access-Control-Allow-Origin"] == PERFETTO_UI_ORIGIN
            assert r.headers["Access-Control-Allow-Private-Network"] == "true"
        assert not srv.fetched.is_set()
        with _get(srv.url, origin=PERFETTO_UI_ORIGIN) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == PERFETTO_UI_ORIGIN
            assert r.read() == trace.read_bytes()
        assert srv.wait(5)
        with pytest.raises(urllib.error.HTTPError) as exc:
            _get(srv.url.rsplit("/", 1)[0] + "/etc/passwd")
        assert exc.value.code == 404


def test_open_in_perfetto_stops_after_the_fetch(trace: Path) -> None:
    seen: list[str] = []

    def browser(url: str) -> bool:
        # Plays the UI: fetch the trace URL embedded in the UI address, from another thread.
        target = url.split("url=", 1)[1]
        threading.Thread(target=lambda: _get(target, PERFETTO_UI_ORIGIN).read(), daemon=True).start()
        return True

    url, fetched = open_in_perfetto(trace, open_browser=browser, on_ready=lambda srv: seen.append(srv.ui_url),
                                    timeout_s=10)
    assert fetched and seen == [url]
    with pytest.raises(urllib.error.URLError):
        _get(url.split("url=", 1)[1])


def test_no_browser_times_out_and_returns_the_url(trace: Path) -> None:
    url, fetched = open_in_perfetto(trace, open_browser=lambda u: False, timeout_s=0.3)
    assert not fetched and url.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        TraceServer(tmp_path / "nope.pftrace")


def _raw_get(port: int, path: str, host: str | None) -> tuple[int, bytes]:
    """A GET over a plain socket, ``Host`` as given (None: no Host header); returns (status, body)."""
    head = f"GET {path} HTTP/1.1\r\n" + (f"Host: {host}\r\n" if host is not None else "")
    head += f"Origin: {PERFETTO_UI_ORIGIN}\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head.encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("host", ["evil.example:{port}", "evil.example", "127.0.0.1", "127.0.0.1:{other}",
                                  "localhost.:{port}", "127.0.0.2:{port}", "attacker.127.0.0.1.nip.io:{port}", "",
                                  None])
def test_other_hosts_get_no_bytes(trace: Path, host: str | None) -> None:
    # A page on another host name that resolves to 127.0.0.1 (DNS rebinding) sends its own name as Host.
    trace.write_bytes(b'{"traceEvents":[{"name":"SECRET-OP"}]}')
    with TraceServer(trace) as srv:
        name = "/" + srv.name
        value = None if host is None else host.format(port=srv.port, other=srv.port + 1)
        status, body = _raw_get(srv.port, name, value)
        assert status == 421 and b"SECRET-OP" not in body
        assert not srv.fetched.is_set()  # a refused request does not end the serving


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LocalHost", "[::1]"])
def test_loopback_hosts_are_served(trace: Path, name: str) -> None:
    with TraceServer(trace) as srv:
        status, body = _raw_get(srv.port, "/" + srv.name, f"{name}:{srv.port}")
        assert status == 200 and body == trace.read_bytes()
        assert srv.wait(5)


def test_describe(trace: Path) -> None:
    with TraceServer(trace) as srv:
        assert srv.describe() == {"path": str(trace.resolve()), "bytes": 18, "url": srv.url, "port": srv.port,
                                  "ui_url": srv.ui_url, "origin": PERFETTO_UI_ORIGIN}


def _layerscope() -> list[str]:
    beside = Path(sys.executable).with_name("layerscope")
    found = str(beside) if beside.is_file() else shutil.which("layerscope")
    assert found, "the layerscope entry point is not installed"
    return [found]


def test_open_json_serves_until_fetched(trace: Path) -> None:
    """`layerscope open T --json --no-browser` prints what it serves as soon as it serves it, and exits 0
    once the file was fetched (here by the test, playing the UI)."""
    proc = subprocess.Popen([*_layerscope(), "open", str(trace), "--json", "--no-browser", "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout is not None
        lines = []
        while not lines or lines[-1] != "}\n":
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else ""
            lines.append(line)
        doc = json.loads("".join(lines))
        assert doc["path"] == str(trace.resolve()) and doc["bytes"] == trace.stat().st_size
        assert doc["url"] == f"http://127.0.0.1:{doc['port']}/my%20trace.json"
        assert doc["ui_url"] == f"{PERFETTO_UI_ORIGIN}/#!/?url={doc['url']}"
        with _get(doc["url"], origin=PERFETTO_UI_ORIGIN) as r:
            assert r.read() == trace.read_bytes()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert out == "" and "trace sent to the Perfetto UI" in err


def test_open_times_out_with_exit_1(run_cli: Run, trace: Path) -> None:
    out = run_cli("open", str(trace), "--json", "--no-browser", "--timeout", "0.5")
    assert out.returncode == 1
    assert json.loads(out.stdout)["path"] == str(trace.resolve())
    assert "not fetched" in out.stderr


@pytest.mark.parametrize("args", [["--timeout", "nan"], ["--timeout", "-1"], ["--timeout", "0"]])
def test_open_refuses_bad_timeouts(run_cli: Run, trace: Path, args: list[str]) -> None:
    out = run_cli("open", str(trace), "--no-browser", *args)
    assert out.returncode == 2 and out.stderr.startswith("error: --timeout:") and out.stdout == ""


def test_open_missing_file(run_cli: Run, tmp_path: Path) -> None:
    out = run_cli("open", str(tmp_path / "nope.json"), "--json", "--no-browser", "--timeout", "1")
    assert out.returncode == 2 and "no such file" in out.stderr and out.stdout == ""
