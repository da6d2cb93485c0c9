"""Unit tests of the live pieces that need no process: dedupe, backoff, token check, store, config."""

from __future__ import annotations

import pytest

from actors.kernel.messages import JobSpec
from live.store import Store
from actors.kernel.transport_ws import ClientTransport, DedupeWindow, bus_url, check_bearer, peek


def test_dedupe_window_is_bounded_and_detects_repeats():
    window = DedupeWindow(3)
    assert not window.seen(("a", 1))
    assert window.seen(("a", 1))
    assert not window.seen(("b", 1))  # same id, other sender: not a repeat
    for i in range(2, 5):
        window.seen(("a", i))
    assert not window.seen(("a", 1))  # fell out of the window
    assert window.duplicates == 1


def test_backoff_doubles_up_to_the_maximum_with_jitter():
    t = ClientTransport("http://127.0.0.1:1", "tok", "n", reconnect_initial_s=0.5, reconnect_max_s=4.0)
    for attempt, base in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (10, 4.0)]:
        delays = [t.backoff_s(attempt) for _ in range(50)]
        assert all(0.5 * base <= d < 1.5 * base for d in delays)
        assert len(set(delays)) > 1


def test_bearer_check():
    assert check_bearer("Bearer s3cret", "s3cret")
    assert check_bearer("bearer s3cret", "s3cret")
    assert not check_bearer("Bearer s3cre", "s3cret")
    assert not check_bearer("Basic s3cret", "s3cret")
    assert not check_bearer(None, "s3cret")
    assert not check_bearer("Bearer ", "")


def test_bus_url_and_peek():
    assert bus_url("http://h:1") == "ws://h:1/v1/bus"
    assert bus_url("https://h/") == "wss://h/v1/bus"
    assert bus_url("ws://h:2/v1/bus") == "ws://h:2/v1/bus"
    from actors.kernel.messages import Heartbeat, encode

    env = peek(encode(Heartbeat(src="node/a", dst="clearinghouse", msg_id=7, node="a")))
    assert (env.type, env.src, env.dst, env.msg_id) == ("heartbeat", "node/a", "clearinghouse", 7)
    assert peek(b"\xc1") is None


def test_store_round_trip_and_requeue(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    spec = JobSpec(model="toy", batch_size=8, scale_factor=2, total_steps=100, job_id=0, name="a")
    store.add_job(0, spec, 10.0, 5.0)
    store.add_lease(1, 0, 0, [0, 1], 10.0, 5.0)
    store.set_lease_state(1, "done")
    store.add_lease(2, 0, 1, [0, 1], 15.0, 5.0)
    store.update_job(0, state="running", steps_done=25)
    store.set_node("w1", [0, 1])
    store.set_meta("round_index", 2)
    store.close()
    again = Store(path)  # a restarted serve
    assert again.requeue_running_leases() == [2]
    assert again.lease_states() == {1: "done", 2: "requeued"}
    (job,) = again.jobs()
    assert (job.job_id, job.state, job.steps_done, job.spec, job.applied_leases) == (0, "running", 25, spec, (1,))
    assert again.nodes() == {"w1": [0, 1]} and again.get_meta("round_index") == 2
    assert again.max_lease_id() == 2 and again.max_job_id() == 0
    import sqlite3

    with pytest.raises(sqlite3.IntegrityError):
        again.add_job(0, spec, 11.0, 5.0)
    assert again.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_store_keeps_change_counts_and_restart_phases_and_upgrades_an_older_database(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    old = sqlite3.connect(path)  # the jobs table as released before these columns existed
    old.executescript(
        "CREATE TABLE jobs (job_id INTEGER PRIMARY KEY, spec BLOB NOT NULL, state TEXT NOT NULL,"
        " steps_done INTEGER NOT NULL DEFAULT 0, total_steps INTEGER NOT NULL, batch_size INTEGER NOT NULL,"
        " throughput REAL NOT NULL DEFAULT 0, run_time_s REAL NOT NULL DEFAULT 0, failures INTEGER NOT NULL DEFAULT 0,"
        " rounds_run INTEGER NOT NULL DEFAULT 0, submit_s REAL NOT NULL, finish_s REAL, reason TEXT NOT NULL DEFAULT '');")
    old.close()
    store = Store(path)
    spec = JobSpec(model="toy", batch_size=8, scale_factor=1, total_steps=100, job_id=0, name="a")
    store.add_job(0, spec, 10.0, 5.0)
    (job,) = store.jobs()
    assert (job.batch_size_changes, job.startup_s, job.shutdown_s) == (0, None, None)
    store.update_job(0, batch_size_changes=23, startup_s=2.5, shutdown_s=0.4)
    store.close()
    (job,) = Store(path).jobs()  # a restarted serve keeps them
    assert (job.batch_size_changes, job.startup_s, job.shutdown_s) == (23, 2.5, 0.4)
    assert Store(path).predictor_states() == {}  # and the older database gained the predictor's table


def test_store_keeps_predictor_states_until_their_jobs_are_forgotten(tmp_path):
    store = Store(tmp_path / "s.db")
    store.save_predictor_states([(0, b"first"), (1, b"b")])
    store.save_predictor_states([(0, b"second")])
    store.close()
    again = Store(tmp_path / "s.db")  # a restarted serve
    assert again.predictor_states() == {0: b"second", 1: b"b"}
    again.forget_predictor_states([1, 7])
    assert again.predictor_states() == {0: b"second"}


def test_local_cluster_config_is_valid_and_env_token_wins(monkeypatch, tmp_path):
    from configs.loader import BUNDLED, load_config
    from workloads.errors import InputError

    cfg = load_config(str(BUNDLED / "local_cluster.toml"))
    assert cfg.rounds.round_mode == "timer" and cfg.live.port == 8470
    monkeypatch.setenv("SHOCKWAVE_TOKEN", "from-env")
    assert cfg.live.resolved_token() == "from-env"
    monkeypatch.delenv("SHOCKWAVE_TOKEN")
    assert cfg.live.resolved_token() == ""
    bad = tmp_path / "bad.toml"
    bad.write_text("[live]\nport = 1\nheartbeat_intervall_s = 2\n")
    with pytest.raises(InputError) as err:
        load_config(bad)
    assert "heartbeat_intervall_s" in str(err.value) and err.value.line == 3


def test_metrics_export_each_running_jobs_measured_restart_phases():
    from prometheus_client import generate_latest

    from actors.records import JobRecord
    from live.api import Metrics
    from live.read_model import ReadModel

    view = ReadModel()
    spec = JobSpec(job_id=0, model="LM", batch_size=10, scale_factor=1, total_steps=100)
    measured = JobRecord(job_id=0, spec=spec, arrival_s=0.0, throughput=1.0, state="running", admitted_s=0.0,
                         startup_s=2.5, shutdown_s=0.25, gpu_ids=(0,))
    fresh = JobRecord(job_id=1, spec=spec, arrival_s=0.0, throughput=1.0, state="running", admitted_s=0.0, gpu_ids=(1,))
    queued = JobRecord(job_id=2, spec=spec, arrival_s=0.0, throughput=1.0, startup_s=9.0)
    for record in (measured, fresh, queued):
        view.publish_job(record)
    metrics = Metrics()
    metrics.view = view
    text = generate_latest(metrics.registry).decode()
    assert 'shockwave_job_restart_overhead_seconds{job_id="0",phase="startup"} 2.5' in text
    assert 'shockwave_job_restart_overhead_seconds{job_id="0",phase="shutdown"} 0.25' in text
    assert 'job_id="1"' not in text.split("shockwave_job_restart_overhead_seconds", 1)[1]  # not measured yet
    assert 'job_id="2",phase' not in text  # not running: not exported
    assert view.job(0, 10.0).restart_overhead_s == 2.75 and view.job(1, 10.0).restart_overhead_s is None


@pytest.mark.parametrize("gpus", ["0", "-1", "1025"])
def test_a_worker_with_a_gpu_count_the_server_would_refuse_stops_before_connecting(gpus, capsys):
    from cli.main import main

    # the server's guard accepts at most 1,024 GPUs per node (live/guard.py); port 1 is never dialled
    assert main(["worker", "--gpus", gpus, "--server", "http://127.0.0.1:1"]) == 2
    assert f"--gpus must be in 1..1024, got {gpus}" in capsys.readouterr().err
