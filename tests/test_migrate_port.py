"""port: the loop end to end with a recorded-transcript test double and over real HTTP on loopback."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from polyrec.migrate.port import extract_code, port
from polyrec.migrate.providers import OpenAICompatibleProvider, ProviderError, RecordedTranscriptProvider
from polyrec.migrate.verify import VerifyConfig

HERE = Path(__file__).parent / "migrate_corpus" / "verify"
KERNEL = Path(__file__).parent / "migrate_corpus" / "port" / "axpy.cu"
REFERENCE = "migrate_ref_ops:axpy"
CONFIG = VerifyConfig(compile=False, seeds=(0, 1))  # two seeds: one seed cannot expose a result cache
SECRET = "sk-test-never-log-me"


@pytest.fixture(autouse=True)
def _reference_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))


def _reply(name: str) -> str:
    return f"Here is the port.\n```python\n{(HERE / name).read_text()}```\n"


def test_loop_feeds_failures_back_until_accepted(tmp_path):
    provider = RecordedTranscriptProvider(replies=[_reply("adv_one_shape.py"), _reply("good_axpy.py")])
    report = port(KERNEL, REFERENCE, provider, work_dir=tmp_path, rounds=3, config=CONFIG)
    assert report.accepted and report.rounds_used == 2
    assert Path(report.result_path).read_text() == (HERE / "good_axpy.py").read_text()
    assert "shape (4097,)" in provider.calls[1][-1]["content"]  # round 2 saw round 1's failure
    entries = [json.loads(line) for line in Path(report.transcript_path).read_text().splitlines()]
    assert [e["verdict"]["accepted"] for e in entries] == [False, True]
    assert any("PM101" in f for f in report.scan_findings)
    replay = RecordedTranscriptProvider.from_file(Path(report.transcript_path))
    assert replay.replies == provider.replies


def test_loop_stops_after_n_rounds(tmp_path):
    provider = RecordedTranscriptProvider(replies=[_reply("adv_cached.py")] * 2)
    report = port(KERNEL, REFERENCE, provider, work_dir=tmp_path, rounds=2, config=CONFIG)
    assert not report.accepted and report.rounds_used == 2 and "no candidate passed" in report.left[0]


def test_without_provider_only_deterministic_stages_run(tmp_path):
    report = port(KERNEL, REFERENCE, None, work_dir=tmp_path, config=CONFIG)
    assert not report.accepted and report.transcript_path is None
    assert "hipMalloc" in Path(report.hipified_path).read_text() or "hip_runtime" in Path(report.hipified_path).read_text()
    assert "no LLM endpoint configured" in report.left[0]


class _StubHandler(BaseHTTPRequestHandler):
    replies: list[str] = []
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        content = type(self).replies[len(type(self).seen) - 1]
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _one_request_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A loopback server of ``handler`` that serves one request; yields its /v1 URL."""
    server = HTTPServer(("127.0.0.1", 0), handler)
    server.timeout = 30
    thread = threading.Thread(target=server.handle_request, daemon=True)  # serves one request, then stops
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        thread.join(timeout=30)
        server.server_close()


def test_real_http_call_to_loopback_stub(tmp_path):
    _StubHandler.replies, _StubHandler.seen = [_reply("good_axpy.py")], []
    with _one_request_server(_StubHandler) as url:
        provider = OpenAICompatibleProvider(url=url, model="stub", api_key=SECRET, timeout_s=30)
        assert SECRET not in repr(provider)
        report = port(KERNEL, REFERENCE, provider, work_dir=tmp_path, rounds=1, config=CONFIG)
    assert report.accepted, report.left
    assert _StubHandler.seen[0]["path"] == "/v1/chat/completions"
    assert _StubHandler.seen[0]["auth"] == f"Bearer {SECRET}"
    assert _StubHandler.seen[0]["body"]["model"] == "stub"
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_http_errors_do_not_leak_the_key():
    provider = OpenAICompatibleProvider(url="http://127.0.0.1:9/v1", model="m", api_key=SECRET, timeout_s=2)
    with pytest.raises(ProviderError) as info:
        provider.complete([{"role": "user", "content": "hi"}])
    assert SECRET not in str(info.value)


class _BrokenReplyHandler(BaseHTTPRequestHandler):
    """An endpoint that drops the connection without a reply, or sends a body shorter than it announced."""

    short = False

    def do_POST(self):  # noqa: N802 (http.server API)
        self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).short:
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            self.wfile.write(b'{"choices"')
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("short, says", [(False, "RemoteDisconnected"), (True, "IncompleteRead")])
def test_a_reply_cut_off_by_the_endpoint_is_a_provider_error(short, says):
    """Was: an OSError that the CLI blamed on --out, or a traceback (IncompleteRead), and no report."""
    _BrokenReplyHandler.short = short
    with _one_request_server(_BrokenReplyHandler) as url:
        provider = OpenAICompatibleProvider(url=url, model="m", timeout_s=30)
        with pytest.raises(ProviderError, match=says):
            provider.complete([{"role": "user", "content": "hi"}])


def test_candidate_that_exits_is_a_failed_round_not_a_crash(tmp_path):
    provider = RecordedTranscriptProvider(replies=[_reply("adv_exits.py"), _reply("good_axpy.py")])
    report = port(KERNEL, REFERENCE, provider, work_dir=tmp_path, rounds=2, config=CONFIG)
    assert report.accepted and report.rounds_used == 2
    assert "exited without results" in provider.calls[1][-1]["content"]


def test_null_content_is_a_provider_error_that_port_reports(tmp_path):
    _StubHandler.replies, _StubHandler.seen = [None], []
    with _one_request_server(_StubHandler) as url:
        provider = OpenAICompatibleProvider(url=url, model="stub", timeout_s=30)
        report = port(KERNEL, REFERENCE, provider, work_dir=tmp_path, rounds=2, config=CONFIG)
    assert not report.accepted and report.rounds_used == 1
    assert "content is NoneType, not text" in report.left[0], report.left


def test_extract_code_takes_last_python_block():
    assert extract_code("a\n```python\nx = 1\n```\nb\n```python\ny = 2\n```") == "y = 2\n"
    assert extract_code("z = 3") == "z = 3\n"


def test_extract_code_reads_python_tags_only():
    """Was: a ```python3 block was not read (the whole reply, fences and all, became the candidate), and after
    a ```cuda block the prose up to the next fence was taken for the code."""
    for tag in ("python3", "py3", "py", "Python", "python title=k.py", ""):
        assert extract_code(f"The port:\n```{tag}\nx = 1\n```\nDone.\n") == "x = 1\n", tag
    for tag in ("cuda", "cpp", "c++", "hip"):
        quoted = (f"The kernel:\n```{tag}\nint k;\n```\nThe port:\n```python\ny = 2\n```\n"
                  f"Note:\n```{tag}\nint z;\n```\n")
        assert extract_code(quoted) == "y = 2\n", tag


@pytest.mark.parametrize("reference, says", [("no_such_module:f", "No module named 'no_such_module'"),
                                             ("math:sqrt", "math must define SHAPES")])
def test_a_bad_reference_is_refused_without_a_provider_too(tmp_path, reference, says):
    with pytest.raises((ImportError, ValueError), match=says):
        port(KERNEL, reference, None, work_dir=tmp_path / "out", config=CONFIG)
    assert not (tmp_path / "out").exists()  # was: "not ported" (exit 1), the reference never read


def test_without_provider_left_names_the_hazards_the_hipified_copy_still_has(tmp_path):
    """Was: `left` listed the source's hazards, also one hipify had fixed in the copy it wrote (a 32-bit lane mask),
    and at the source's lines, not the copy's."""
    kernel = tmp_path / "k.cu"
    kernel.write_text("// k\n__device__ int h(int v) { return __shfl_xor_sync(0xffffffff, v, 1) + 32; }\n"
                      "constexpr int WARP_SIZE = 32;\n")
    report = port(kernel, REFERENCE, None, work_dir=tmp_path / "out", config=CONFIG)
    assert any(f.startswith("PM102 line 2") for f in report.scan_findings)  # the prompt's: the source's hazards
    hipified = Path(report.hipified_path).read_text().splitlines()
    assert hipified[3] == "constexpr int WARP_SIZE = 32;"
    assert report.left[1:] == ["hazard in k.hip.cu: PM101 line 4: WARP_SIZE = 32 hard-codes the warp size; AMD "
                               "wavefronts are 64 wide (use warpSize)"]
