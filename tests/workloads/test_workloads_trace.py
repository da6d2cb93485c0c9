"""Trace parsing: the published traces and every error the parser reports (§1.1)."""

from collections import Counter

import pytest

from workloads.errors import InputError
from workloads.trace import parse_trace

GOOD = [
    "LM (batch size 10)",
    "python3 main.py --cuda --data %s/wikitext2 --batch_size 10",
    "language_modeling",
    "--steps",
    "1",
    "134583",
    "1",
    "gns",
    "1",
    "-1.000000",
    "1418",
    "0",
]


def _line(**changes: str) -> str:
    fields = list(GOOD)
    for key, value in changes.items():
        fields[int(key[1:]) - 1] = value
    return "\t".join(fields)


def _write(tmp_path, lines, name="bad.trace"):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


def test_canonical_trace(trace_120, tacc):
    jobs = parse_trace(trace_120, tacc)
    assert len(jobs) == 120
    first = jobs[0]
    assert (first.job_id, first.line, first.model, first.batch_size) == (0, 1, "LM", 10)
    assert first.command == GOOD[1] and first.working_directory == "language_modeling"
    assert first.num_steps_arg == "--steps" and first.needs_data_dir is True
    assert (first.total_steps, first.scale_factor, first.mode) == (134583, 1, "gns")
    assert first.priority_weight == 1.0 and first.slo is None
    assert (first.duration_s, first.arrival_s) == (1418.0, 0.0)
    assert [j.job_id for j in jobs] == list(range(120))
    assert Counter(j.model for j in jobs) == {"ResNet-18": 21, "ResNet-50": 15, "Transformer": 13, "LM": 36, "Recommendation": 35}
    assert Counter(j.mode for j in jobs) == {"gns": 57, "accordion": 59, "static": 4}
    assert Counter(j.scale_factor for j in jobs) == {1: 92, 2: 20, 4: 8}
    assert jobs[-1].arrival_s == pytest.approx(5011, abs=1)
    assert sum(j.duration_s for j in jobs) == 496_241
    # Field 6 is duration x the table's throughput (generated with tacc), to within 1 %.
    for job in jobs:
        rate = tacc.throughput(job.model, job.batch_size, job.scale_factor)
        assert job.total_steps / job.duration_s == pytest.approx(rate, rel=0.01)


def test_scale_trace_parses_with_wisr(trace_900, wisr):
    jobs = parse_trace(trace_900, wisr)
    assert len(jobs) == 900
    assert Counter(j.mode for j in jobs) == {"gns": 419, "accordion": 454, "static": 27}
    assert Counter(j.scale_factor for j in jobs) == {1: 617, 2: 208, 4: 63, 8: 12}
    assert jobs[-1].arrival_s == pytest.approx(4400, abs=1)


def test_blank_lines_are_skipped_and_crlf_accepted(tmp_path):
    path = tmp_path / "ok.trace"
    path.write_bytes(("\n" + _line() + "\r\n   \n" + _line(f12="10") + "\r\n\n").encode())
    jobs = parse_trace(path)
    assert [(j.job_id, j.line) for j in jobs] == [(0, 2), (1, 4)]
    assert jobs[1].arrival_s == 10.0


def test_slo_kept_when_not_negative(tmp_path):
    (job,) = parse_trace(_write(tmp_path, [_line(f10="2.5", f9="5")]))
    assert job.slo == 2.5 and job.priority_weight == 5.0


ERRORS = [
    # (lines, line number, field prefix or None, message fragment)
    ([_line(), "\t".join(GOOD[:11])], 2, None, "expected 12 tab-separated fields, got 11"),
    ([_line() + "\textra"], 1, None, "got 13"),
    ([_line(f1="LM batch 10")], 1, "1 (job_type)", "batch size"),
    ([_line(f1="GPT (batch size 10)")], 1, "1 (job_type)", "unknown model 'GPT'"),
    ([_line(f5="2")], 1, "5 (needs_data_dir)", "expected 0 or 1"),
    ([_line(f5="yes")], 1, "5 (needs_data_dir)", "expected an integer, got 'yes'"),
    ([_line(f6="12.5")], 1, "6 (total_steps)", "expected an integer, got '12.5'"),
    ([_line(f6="0")], 1, "6 (total_steps)", "must be >= 1"),
    ([_line(), _line(f7="abc")], 2, "7 (scale_factor)", "expected an integer, got 'abc'"),
    ([_line(f7="0")], 1, "7 (scale_factor)", "must be >= 1, got 0"),
    ([_line(f7="1_0")], 1, "7 (scale_factor)", "expected an integer"),
    ([_line(f8="dynamic")], 1, "8 (mode)", "expected one of accordion, gns, static, got 'dynamic'"),
    ([_line(f9="heavy")], 1, "9 (priority_weight)", "expected a number, got 'heavy'"),
    ([_line(f9="0")], 1, "9 (priority_weight)", "must be > 0"),
    ([_line(f10="nan")], 1, "10 (slo)", "finite"),
    ([_line(f11="-3")], 1, "11 (duration)", "must be >= 0"),
    ([_line(f11="")], 1, "11 (duration)", "expected a number, got ''"),
    ([_line(f12="-1")], 1, "12 (arrival_time)", "must be >= 0"),
    ([_line(f12="inf")], 1, "12 (arrival_time)", "finite"),
    ([_line(f12="50"), _line(f12="10")], 2, "12 (arrival_time)", "non-decreasing"),
    # bounded above: 1e30 steps do not fit a message, and at 1e300 s the clock no longer moves by a round
    ([_line(f1="LM (batch size 1000001)")], 1, "1 (job_type)", "batch size must be in [1, 1000000]"),
    ([_line(f6=str(10**30))], 1, "6 (total_steps)", "must be <= 1000000000000"),
    ([_line(f7="100001")], 1, "7 (scale_factor)", "must be <= 100000"),
    ([_line(f9="1e300")], 1, "9 (priority_weight)", "must be <= 1e+06"),
    ([_line(f11="1e8")], 1, "11 (duration)", "must be <= 1e+07"),
    ([_line(f12="1e300")], 1, "12 (arrival_time)", "must be <= 1e+13, got 1e+300"),
]


@pytest.mark.parametrize("lines, line_no, field, fragment", ERRORS)
def test_errors_name_file_line_and_field(tmp_path, lines, line_no, field, fragment):
    path = _write(tmp_path, lines)
    with pytest.raises(InputError) as info:
        parse_trace(path)
    err = info.value
    prefix = f"{path}:{line_no}: " + (f"field {field}: " if field else "")
    assert str(err).startswith(prefix), str(err)
    assert fragment in str(err)
    assert (err.source, err.line, err.field) == (str(path), line_no, field)


def test_configuration_missing_from_throughput_table(tmp_path, tacc):
    path = _write(tmp_path, [_line(), _line(f1="Recommendation (batch size 512)", f7="2")])
    parse_trace(path)  # fine without a table
    with pytest.raises(InputError) as info:
        parse_trace(path, tacc)
    message = str(info.value)
    assert message.startswith(f"{path}:2: field 1 (job_type): ")
    assert "field 7 (scale_factor) = 2" in message and "tacc_throughputs.json" in message


def test_zero_throughput_configuration_rejected(tmp_path, tacc):
    path = _write(tmp_path, [_line(f1="Transformer (batch size 256)")])
    with pytest.raises(InputError, match="field 1 \\(job_type\\)"):
        parse_trace(path, tacc)


def test_unreadable_file(tmp_path):
    with pytest.raises(InputError, match="cannot read trace"):
        parse_trace(tmp_path / "missing.trace")
    path = tmp_path / "binary.trace"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="UTF-8"):
        parse_trace(path)
