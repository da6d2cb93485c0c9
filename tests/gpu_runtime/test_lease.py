"""Lease protocol without torch: spec parsing, iterator stop rules, sinks, message round trips."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pytest

from gpu_runtime.lease import (
    BatchSizeChanged,
    HttpProgressSink,
    JsonLinesProgressSink,
    LeaseEnded,
    LeaseIterator,
    LeaseSpec,
    Progress,
    decode_report,
    decode_report_json,
    encode_report,
    encode_report_json,
    read_reports,
    rescale_total_steps,
    write_lease_file,
)
from workloads.errors import InputError


class FakeClock:
    def __init__(self, t: float = 100.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


class ListSink:
    def __init__(self):
        self.msgs = []
        self.closed = False

    def report(self, msg):
        self.msgs.append(msg)

    def close(self):
        self.closed = True


def _progress(**kw) -> Progress:
    base = dict(job_id=7, lease_id="L", round_index=3, time=1.5, steps=4, job_steps=8, total_steps=100,
                epoch=1, seconds=2.0, throughput=2.0, batch_size=32, world_size=2, loss=0.25)
    base.update(kw)
    return Progress(**base)


def test_protocol_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import gpu_runtime.lease, gpu_runtime.launcher\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                         cwd=str(Path(__file__).resolve().parents[2]))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_iterator_stops_at_max_steps_and_counts_epochs():
    spec = LeaseSpec(job_id=1, max_steps=5)
    sink = ListSink()
    it = LeaseIterator(range(3), spec, sink, batch_size=8)
    got = list(it)
    assert got == [0, 1, 2, 0, 1]
    assert it.steps == 5 and it.stop_reason == "lease_end" and it.epoch == 1
    end = it.finish(checkpoint_path="/x")
    assert isinstance(end, LeaseEnded) and end.reason == "lease_end" and end.steps == 5
    assert sink.msgs[-1] is end and sink.closed


def test_iterator_stops_at_max_seconds_with_fake_clock():
    clock = FakeClock()
    spec = LeaseSpec(job_id=1, max_seconds=3.5, report_interval=1000)
    it = LeaseIterator(range(100), spec, batch_size=4, clock=clock, wall_clock=lambda: 0.0)
    seen = []
    for x in it:
        seen.append(x)
        clock.t += 1.0  # each step takes one second
    assert seen == [0, 1, 2, 3]  # the stop is noticed before the 5th batch (4 s >= 3.5 s)
    assert it.stop_reason == "lease_end"
    assert it.seconds == pytest.approx(4.0)


def test_deadline_shortens_the_lease():
    spec = LeaseSpec(job_id=1, max_seconds=100, deadline=1010.0, checkpoint_margin=2.0)
    assert spec.effective_max_seconds(1000.0) == pytest.approx(8.0)
    assert spec.effective_max_seconds(2000.0) == 0.0
    assert LeaseSpec(job_id=1).effective_max_seconds(0.0) is None


def test_iterator_completion_counts_job_steps_per_rank():
    it = LeaseIterator(range(10), LeaseSpec(job_id=1, max_steps=100), batch_size=4, world_size=2,
                       job_steps=6, total_steps=12)
    assert len(list(it)) == 3  # 6 + 3 * 2 = 12
    assert it.stop_reason == "completed" and it.job_steps == 12


def test_iterator_preempted_and_gang_agreement():
    flag = {"on": False}
    it = LeaseIterator(range(10), None, batch_size=4, stop_requested=lambda: flag["on"])
    for x in it:
        if x == 2:
            flag["on"] = True
    assert it.steps == 3 and it.stop_reason == "preempted"

    # Another rank was preempted: this rank's local wish is False, the MAX all-reduce says stop.
    calls = []

    def agree(local: bool) -> bool:  # MAX over this rank and another preempted at step 3
        calls.append((it.steps, local))
        return local or it.steps >= 3

    it = LeaseIterator(range(10), None, batch_size=4, agree=agree, sync_every=2)
    n = len(list(it))
    # agreement points at steps 0, 2, 4: the stop lands on step 4 on every rank
    assert n == 4 and it.stop_reason == "preempted"
    assert calls == [(0, False), (2, False), (4, False), (4, False)]


def test_progress_batch_size_change_and_jsonlines(tmp_path):
    clock = FakeClock()
    path = tmp_path / "p.jsonl"
    spec = LeaseSpec(job_id=9, round_index=2, report_interval=0.0, progress_file=str(path))
    sink = JsonLinesProgressSink(path)
    it = LeaseIterator(range(100), spec, sink, batch_size=16, total_steps=100, clock=clock, wall_clock=lambda: 5.0)
    for x in it:
        it.record_loss(1.0 / (x + 1))
        clock.t += 0.5
        if x == 3:
            msg = it.set_batch_size(32, mode="gns", statistic=40.0)
            assert msg is not None and msg.total_steps == 4 + 48  # 96 remaining samples-steps at 16 -> 48 at 32
        if x == 5:
            break
    it.finish("preempted", checkpoint_path="/c")
    reports = read_reports(path)
    kinds = [type(r).__name__ for r in reports]
    assert kinds.count("BatchSizeChanged") == 1 and kinds[-1] == "LeaseEnded"
    progress = [r for r in reports if isinstance(r, Progress)]
    assert [p.steps for p in progress] == [1, 2, 3, 4, 5]
    assert progress[0].throughput == pytest.approx(2.0)  # one step per 0.5 s
    assert progress[-1].batch_size == 32 and progress[0].batch_size == 16
    assert progress[2].loss == pytest.approx(1 / 3)
    change = next(r for r in reports if isinstance(r, BatchSizeChanged))
    assert (change.old_batch_size, change.new_batch_size, change.mode) == (16, 32, "gns")
    assert reports[-1].reason == "preempted" and reports[-1].round_index == 2


def test_read_reports_ignores_torn_last_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_bytes(encode_report_json(_progress()) + b"\n" + b'{"kind":"lease_en')
    assert len(read_reports(p)) == 1
    p.write_bytes(b'{"kind":"nope"}\n' + encode_report_json(_progress()) + b"\n")
    with pytest.raises(InputError) as e:
        read_reports(p)
    assert e.value.line == 1


def test_rescale_total_steps():
    assert rescale_total_steps(100, 40, 16, 32) == 70
    assert rescale_total_steps(100, 40, 32, 16) == 160
    assert rescale_total_steps(100, 100, 16, 32) == 100


@pytest.mark.parametrize("msg", [
    _progress(),
    _progress(loss=None, total_steps=None),
    BatchSizeChanged(job_id=1, lease_id="a", round_index=0, time=2.0, old_batch_size=16, new_batch_size=32,
                     epoch=3, job_steps=10, total_steps=50, mode="accordion", statistic=0.7),
    LeaseEnded(job_id=1, lease_id="a", round_index=0, time=2.0, reason="completed", steps=5, job_steps=50,
               total_steps=50, epoch=4, seconds=3.0, throughput=1.6, batch_size=8, world_size=1,
               checkpoint_path="/ck/ckpt.pt"),
])
def test_report_round_trip(msg):
    assert decode_report(encode_report(msg)) == msg
    assert decode_report_json(encode_report_json(msg)) == msg


def test_bad_report_raises_input_error():
    bad = msgspec.msgpack.encode({"kind": "lease_ended", "job_id": 1})
    with pytest.raises(InputError):
        decode_report(bad)
    with pytest.raises(InputError):
        decode_report(b"\xc1")
    with pytest.raises(InputError) as e:
        decode_report_json(b'{"kind":"lease_ended","job_id":1,"lease_id":"a","round_index":0,"time":1,'
                           b'"reason":"bored","steps":1,"job_steps":1,"total_steps":null,"epoch":0,'
                           b'"seconds":1,"throughput":1,"batch_size":1,"world_size":1}')
    assert e.value.field == "reason"


def test_spec_env_round_trip_and_errors(tmp_path):
    spec = LeaseSpec(job_id=4, round_index=7, max_steps=50, max_seconds=9.5, deadline=1234.5, batch_size=64,
                     total_steps=900, checkpoint_dir="/ck", progress_url="http://h/p", progress_token="t",
                     backend="nccl", gpu_ids=(2, 3))
    assert spec.lease_id == "job4-round7"
    assert LeaseSpec.from_env(spec.to_env()) == spec
    assert LeaseSpec.from_env({}) is None
    with pytest.raises(InputError) as e:
        LeaseSpec.from_env({"SHOCKWAVE_JOB_ID": "1", "SHOCKWAVE_MAX_STEPS": "ten"})
    assert e.value.source == "SHOCKWAVE_MAX_STEPS" and e.value.field == "max_steps"
    with pytest.raises(InputError):
        LeaseSpec.from_env({"SHOCKWAVE_JOB_ID": "1", "SHOCKWAVE_BACKEND": "mpi"})
    with pytest.raises(InputError) as e:
        LeaseSpec(job_id=1, batch_size=0)
    assert e.value.field == "batch_size"
    f = write_lease_file(spec, tmp_path / "lease.json")
    assert LeaseSpec.from_env({"SHOCKWAVE_LEASE_FILE": str(f)}) == spec
    (tmp_path / "bad.json").write_text('{"job_id": 1, "max_steps": "x"}')
    with pytest.raises(InputError) as e:
        LeaseSpec.from_json_file(tmp_path / "bad.json")
    assert e.value.field == "max_steps"


class _Handler(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Handler.received.append((self.headers.get("Authorization"), self.headers.get("Content-Type"), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_http_sink_posts_msgpack_and_survives_failures():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/progress"
        sink = HttpProgressSink(url, "secret")
        sink.report(_progress())
        assert sink.sent == 1 and sink.failures == 0
        auth, ctype, body = _Handler.received[-1]
        assert auth == "Bearer secret" and ctype == "application/msgpack"
        assert decode_report(body) == _progress()
    finally:
        server.shutdown()
        server.server_close()
    clock = FakeClock()
    dead = HttpProgressSink(url, timeout=0.5, backoff=10.0, clock=clock)
    dead.report(_progress())  # connection refused: logged, not raised
    assert dead.failures == 1
    dead.report(_progress())  # Progress skipped during the back-off
    assert dead.failures == 1
    dead.report(LeaseEnded(job_id=1, lease_id="a", round_index=0, time=2.0, reason="failed", steps=0, job_steps=0,
                           total_steps=None, epoch=0, seconds=0.0, throughput=0.0, batch_size=1, world_size=1))
    assert dead.failures == 2  # final reports are always attempted
