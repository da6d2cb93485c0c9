"""The documents a newcomer follows: every cited document and section exists in the repository,
the live-cluster quick start works when pasted as it is, and run outputs stay out of git."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.stdout.split()]


def _headings(doc: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in doc.read_text().splitlines() if line.startswith("#")]


def test_every_cited_document_exists():
    missing = set()
    for path in _tracked("*.py", "*.md", "*.toml"):
        if path == Path(__file__).resolve():
            continue  # this file names documents as path parts ("docs" / "reference.md")
        for cited in re.findall(r"[A-Za-z0-9_./-]+\.md\b", path.read_text()):
            if cited.startswith(("http", "//")):
                continue
            if not (ROOT / cited).is_file() and not (path.parent / cited).is_file():
                missing.add(f"{path.relative_to(ROOT)} cites {cited}")
    assert sorted(missing) == []


#: a citation of the elastic schedulers' design: "seed_systems.md §2.3" or "seed_systems.md §0, §1.4"
SEED_CITATION = re.compile(r"seed_systems\.md((?:,? ?(?:and )?§ ?\d+(?:\.\d+)?)+)")


def _sections(doc: Path) -> set[str]:
    return {h.split()[0].rstrip(".") for h in _headings(doc) if h[:1].isdigit()}


def test_every_cited_reference_section_exists():
    """``§N`` cites docs/reference.md, except after ``seed_systems.md`` (docs/seed_systems.md)."""
    sections, seed_sections = _sections(ROOT / "docs" / "reference.md"), _sections(ROOT / "docs" / "seed_systems.md")
    cited, seed_cited = {}, {}
    for path in _tracked("*.py", "*.md", "*.json"):
        text = path.read_text()
        for group in SEED_CITATION.findall(text):
            for number in re.findall(r"§ ?(\d+(?:\.\d+)?)", group):
                seed_cited.setdefault(number, str(path.relative_to(ROOT)))
        if path.suffix == ".json":
            continue
        for number in re.findall(r"§ ?(\d+(?:\.\d+)?)", SEED_CITATION.sub("", text)):
            cited.setdefault(number, str(path.relative_to(ROOT)))
    assert {n: where for n, where in cited.items() if n not in sections} == {}
    assert {n: where for n, where in seed_cited.items() if n not in seed_sections} == {}
    assert len(seed_cited) > 5  # the elastic schedulers cite their design


def test_every_cited_architecture_section_exists():
    headings = set(_headings(ROOT / "docs" / "architecture.md"))
    bad = [
        f"{path.relative_to(ROOT)}: {name}"
        for path in _tracked("*.py", "*.md")
        for name in re.findall(r'docs/architecture\.md "([^"]+)"', path.read_text())
        if name not in headings
    ]
    assert bad == []


def test_run_outputs_and_live_state_are_ignored():
    names = ["shockwave_state.db", "shockwave_state.db-wal", "shockwave_state.db-shm", "results/sw/results.json",
             "results-900/results.json", "out/x.json"]
    out = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True)
    if out.returncode == 128:
        pytest.skip("not a git checkout")
    assert out.stdout.split() == names


def _quick_start() -> str:
    text = (ROOT / "docs" / "live_cluster.md").read_text()
    section = text[text.index("## One machine"):]
    return section[section.index("```sh\n") + 6:section.index("\n```", section.index("```sh\n"))]


def test_quick_start_waits_for_readiness_before_it_uses_the_cluster():
    lines = _quick_start().splitlines()
    first = lambda needle: next(i for i, line in enumerate(lines) if needle in line)  # noqa: E731
    assert first("/healthz") < first("shockwave worker")
    assert first('"num_gpus":4') < first("shockwave submit")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("curl") is None, reason="the quick start uses curl")
def test_quick_start_runs_as_pasted(tmp_path):
    """The block of docs/live_cluster.md "One machine", unchanged, from a folder laid out like the
    repository after the README's set-up (.venv and configs/)."""
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    if not (tmp_path / ".venv" / "bin" / "activate").is_file():
        pytest.skip("tests are not running from a virtual environment")
    env = {k: v for k, v in os.environ.items() if k not in ("SHOCKWAVE_TOKEN", "SHOCKWAVE_CLUSTER_TOKEN", "VIRTUAL_ENV")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    log = tmp_path / "quick_start.log"
    with log.open("w") as sink:  # serve and the workers keep it open: wait for bash, not for EOF
        proc = subprocess.Popen(["bash", "-e", "-c", _quick_start()], cwd=tmp_path, env=env, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=300)  # bounds a hang; the block itself waits on conditions
        except subprocess.TimeoutExpired:
            pytest.fail(f"the quick start did not finish:\n{log.read_text()[-3000:]}")
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # serve and the two workers it left running
            except ProcessLookupError:
                pass
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    assert '"job_id": 0' in out or '"job_id":0' in out, out[-3000:]
    assert '"model":"ResNet-18"' in out, out[-3000:]  # the job's status, read back over HTTP
