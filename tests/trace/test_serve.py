"""Serving one trace to ui.perfetto.dev (layerscope/trace/serve.py), over loopback only."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from layerscope.errors import TraceError
from layerscope.trace.serve import PERFETTO_UI_ORIGIN, TraceServer, open_in_perfetto


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    p = tmp_path / "my trace.json"
    p.write_bytes(b'{"traceEvents":[]}')
    return p


def _get(url: str, origin: str | None = None, method: str = "GET"):  # type: ignore[no-untyped-def]
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

    url, fetched = open_in_perfetto(trace, open_browser=browser, on_ready=seen.append, timeout_s=10)
    assert fetched and seen == [url]
    with pytest.raises(urllib.error.URLError):
        _get(url.split("url=", 1)[1])


def test_no_browser_times_out_and_returns_the_url(trace: Path) -> None:
    url, fetched = open_in_perfetto(trace, open_browser=lambda u: False, timeout_s=0.3)
    assert not fetched and url.startswith("https://ui.perfetto.dev/#!/?url=http://127.0.0.1:")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        TraceServer(tmp_path / "nope.pftrace")
