"""``[[candidates]]`` in a registry file: other versions of its models, with a rollout plan."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from tests.rollout.registries import with_candidates
from worker.models import CandidateSpec, RegistryFile, candidate_key
from worker.settings.rollout_plan import Gates, Mode, RolloutPlan

TOML = with_candidates(
    """mode = "shadow"
interval_s = 30
sample = 0.5
gates = { max_disagreement = 0.1, min_requests = 20 }"""
)


def parse(tmp_path: Path, text: str) -> RegistryFile:
    path = tmp_path / "registry.toml"
    path.write_text(text)
    return RegistryFile.from_toml(path)


def test_candidates_parse_with_their_rollout_plans(tmp_path: Path) -> None:
    registry = parse(tmp_path, TOML)

    digits, diabetes = registry.candidates
    assert isinstance(digits, CandidateSpec)
    assert (digits.name, digits.version) == ("digits", "2")
    assert digits.path == tmp_path.resolve() / "digits-2.pt2"
    assert digits.rollout == RolloutPlan(
        mode=Mode.SHADOW,
        interval_s=30,
        sample=0.5,
        gates=Gates(max_disagreement=0.1, min_requests=20),
    )
    assert diabetes.rollout is None
    assert [m.version for m in registry.models] == ["1", "1"]
    assert candidate_key(digits.name, digits.version) == "digits@2"


def test_a_registry_without_candidates_has_none(tmp_path: Path) -> None:
    assert parse(tmp_path, TOML.split("[[candidates]]")[0]).candidates == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('name = "diabetes"\nversion = "2"', 'name = "house"\nversion = "2"'),
         "candidate house@2: no \\[\\[models\\]\\] entry named 'house'"),
        (('name = "diabetes"\nversion = "2"', 'name = "diabetes"\nversion = "1"'),
         "candidate diabetes@1: version '1' is the version \\[\\[models\\]\\] serves"),
        (('name = "diabetes"\nversion = "2"', 'name = "digits"\nversion = "2"'),
         "duplicate candidates: digits@2"),
        (('name = "digits"\nversion = "1"', 'name = "dig@its"\nversion = "1"'),
         "model name 'dig@its' contains '@'"),
        (("sample = 0.5", "sample = 0.5\nsteps = [5, 1, 100]"),
         "steps must be distinct, ascending percentages ending at 100"),
        (("sample = 0.5", "sample = 0.5\nspeed = 2"), "Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_invalid_candidates_say_why(tmp_path: Path, change: tuple[str, str], message: str) -> None:
    assert change[0] in TOML
    with pytest.raises(ValidationError, match=message):
        parse(tmp_path, TOML.replace(*change, 1))
