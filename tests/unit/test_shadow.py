"""Shadow runs (engine/core/shadow.py) on a real journal of a world with three traits: baseline and
candidate forked from one snapshot on the same recorded inputs; the same request gives the same
bytes; a candidate with the same rules ends in the baseline's state; other rules change it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from engine.core.replay import ReplayError
from engine.core.shadow import report_hash, shadow
from genesis import canonical
from tests.journal_worlds import journal_settings, run_journaled

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def journal_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("shadow-journal")
    import asyncio

    asyncio.run(run_journaled(journal_settings(path, 21, journal_snapshot_interval=200), 900))
    return path


def test_the_same_rules_end_in_the_same_state_and_other_rules_do_not(journal_dir):
    same = shadow(journal_dir, 300, {}, {})
    assert same["recorded_ticks"] == 300 and same["differences"]["same_end_state"]
    assert same["from_tick"] + 300 <= 900  # a snapshot with a full window of recorded ticks after it
    richer = shadow(journal_dir, 300, {}, {"resource_energy": 60.0, "max_resources": 400})
    assert not richer["differences"]["same_end_state"]
    assert richer["candidate"]["params"]["resource_energy"] == 60.0
    assert richer["baseline"]["params"]["resource_energy"] != 60.0
    assert richer["candidate"]["energy_end"] != richer["baseline"]["energy_end"]


def test_a_shadow_report_is_byte_identical_when_run_twice(journal_dir):
    args = [sys.executable, "-m", "engine.core.shadow", "--journal", str(journal_dir), "--ticks", "250"]
    args += ["--candidate", json.dumps({"base_metabolism": 0.1})]
    outputs = [subprocess.run(args, capture_output=True, check=True, timeout=120).stdout for _ in range(2)]
    assert outputs[0] == outputs[1]
    answer = json.loads(outputs[0])
    assert answer["report_hash"] == report_hash(answer["report"])
    assert canonical.decode(canonical.encode(answer["report"])) == answer["report"]


def test_a_window_past_the_journal_runs_on_instinct_and_bad_rules_are_refused(journal_dir):
    long = shadow(journal_dir, 2000, {}, {})
    assert long["recorded_ticks"] < 2000 and long["ticks"] == 2000
    with pytest.raises(ReplayError, match="not a governed parameter"):
        shadow(journal_dir, 10, {}, {"width": 10.0})
