"""The book's recording campaign (minitorch_cuda/book/campaign.py, .ci/record_book.sh): every record
a page reads is made by a step of one group or kept with its reason, each group fits a device call,
each step's command can make what it claims, and a group run archives what its steps wrote and
stops before a step that would overrun the call. Fast: no GPU, no record re-made."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tarfile
from pathlib import Path

import pytest

from minitorch_cuda.book import campaign

ROOT = Path(__file__).resolve().parents[1]


def test_every_record_a_page_reads_is_made_by_a_group_or_kept() -> None:
    read, made = campaign.records_read(), campaign.made()
    forgotten = {name: pages for name, pages in read.items() if name not in made and name not in campaign.KEPT}
    assert not forgotten, (
        f"records the book reads that no campaign step makes: {forgotten}; add the command that makes each "
        f"to a group in minitorch_cuda/book/campaign.py (or, for a one-off probe's record, to KEPT with why)"
    )


def test_kept_records_are_read_exist_and_are_not_also_made() -> None:
    read = campaign.records_read()
    assert not set(campaign.KEPT) & set(campaign.made())
    for name, why in campaign.KEPT.items():
        assert name in read, f"{name} is kept but no page reads it: delete book/results/{name}.json instead"
        assert (ROOT / "book" / "results" / f"{name}.json").exists() and why


def test_one_step_makes_each_record_and_each_group_fits_a_call() -> None:
    makers = [record for steps in campaign.GROUPS.values() for step in steps for record in step.makes]
    assert len(makers) == len(set(makers)), "a record made by two steps: the later one would silently win"
    for group, steps in campaign.GROUPS.items():
        total = sum(step.estimate_s for step in steps)
        assert total <= campaign.CALL_LIMIT_S, f"{group}: {total} s estimated, over {campaign.CALL_LIMIT_S} s"


def _sources(command: tuple[str, ...]) -> str:
    """The text of what a step runs: its chapter, script, module or package."""
    if command[1] == "-m":
        spec = importlib.util.find_spec(command[2])
        assert spec is not None, f"no module {command[2]}"
        origin = Path(spec.origin)
        files = sorted(origin.parent.glob("*.py")) if origin.name == "__init__.py" else [origin]
        return "\n".join(f.read_text() for f in files)
    paths = [ROOT / part for part in command[1:] if (ROOT / part).is_file()]
    assert paths, f"nothing of {command} exists"
    return "\n".join(p.read_text() for p in paths)


@pytest.mark.parametrize(
    "step", [s for steps in campaign.GROUPS.values() for s in steps], ids=lambda s: " ".join(s.command[1:])
)
def test_each_step_runs_something_that_names_its_records(step) -> None:
    """A step's records are named by what it runs (results.save("ch14_cublas", ...), RESULT_NAME =
    "tile_eval", ncu's topics) or by its own command (--json {results}/tf32_wgmma.json)."""
    text = _sources(step.command) + " ".join(step.command)
    if step.command[1:3] == ("-m", "minitorch_cuda.experiments.ncu"):
        from minitorch_cuda.experiments import ncu

        assert set(step.makes) == {f"ncu_{topic}" for topic in ncu.TOPICS}
        return
    for record in step.makes:
        assert re.search(rf"\b{record}\b", text), f"{' '.join(step.command)} never names {record}"


def test_a_group_archives_what_its_steps_wrote_and_leaves_what_would_overrun(tmp_path) -> None:
    root = tmp_path / "repo"
    (root / "book" / "results").mkdir(parents=True)
    (root / "book" / "results" / "old.json").write_text('{"v": 1}')
    (root / "book" / "results" / "same.json").write_text('{"v": 1}')

    def writer(name: str, value: int) -> tuple[str, ...]:
        code = f"import os, pathlib; (pathlib.Path(os.environ['MINITORCH_CUDA_RESULTS_DIR']) / '{name}.json')"
        return (sys.executable, "-c", code + f".write_text('{{\"v\": {value}}}')")

    steps = (
        campaign.Step(writer("old", 2), ("old",), 1, "test"),  # re-made
        campaign.Step(writer("new", 1), ("new", "promised"), 1, "test"),  # "promised" is never written
        campaign.Step(writer("same", 1), ("same",), 1, "test"),  # rewritten unchanged: nothing to bring back
        campaign.Step(writer("stray", 1), (), 1, "test"),  # a file no step claims: named, not archived
        campaign.Step(writer("late", 1), ("late",), 10_000, "test"),  # would not fit the call
    )
    report = campaign.run_group("g", steps, tmp_path / "out", root=root, limit_s=60)
    with tarfile.open(tmp_path / "out" / "records_g.tar.gz") as archive:
        names = sorted(archive.getnames())
        assert json.loads(archive.extractfile("old.json").read()) == {"v": 2}
    assert names == ["new.json", "old.json"]
    assert report["records_written"] == ["new", "old"] and report["other_files_written"] == ["stray.json"]
    assert [s["missing"] for s in report["steps"]] == [[], ["promised"], ["same"], []]
    assert report["left"] == [{"command": " ".join(steps[-1].command), "makes": ["late"]}]
    assert json.loads((tmp_path / "out" / "campaign_g.json").read_text())["group"] == "g"
    assert (root / "book" / "results" / "old.json").read_text() == '{"v": 1}', "the tree's records are untouched"


def test_the_command_lists_the_plan_and_refuses_unknown_groups(capsys) -> None:
    assert campaign.main(["--list"]) == 0
    plan = capsys.readouterr().out
    assert all(f"{group}: about" in plan for group in campaign.GROUPS) and "tile_eval" in plan
    with pytest.raises(SystemExit):
        campaign.main(["nonsense"])
    assert "unknown group(s) nonsense" in capsys.readouterr().err


def test_parallel_groups_each_need_a_gpu_of_their_own(monkeypatch, capsys) -> None:
    monkeypatch.setattr(campaign, "_gpu_count", lambda: 1)
    assert campaign.main(["--parallel", "ladder", "tile"]) == 2
    assert "--parallel needs a GPU per group: 2 groups, 1 GPU(s) here" in capsys.readouterr().err
