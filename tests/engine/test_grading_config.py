"""The [grading] table is checked like every other section: unknown keys are rejected naming
the key (with a did-you-mean), final_repeats is validated, nested tables are checked too."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from engine.config import ConfigError, parse_config
from engine.grading_table import BACKEND_KEYS

BASE = """
[experiment]
name = "x"
problems = ["p28"]
grading = "{grading}"

[[models]]
name = "m"

[grading]
{grading_table}
"""


def config(grading_table: str, grading: str = "local"):  # noqa: ANN201 - ExperimentConfig
    text = BASE.format(grading=grading, grading_table=grading_table)
    return parse_config(text, "exp.toml", check_problems=False)


def test_final_repeats_defaults_to_one_and_is_read() -> None:
    assert config("").final_repeats == 1
    parsed = config("final_repeats = 3")
    assert parsed.final_repeats == 3
    assert "final_repeats" not in parsed.grading_options  # never passed to a backend


@pytest.mark.parametrize("value", ["0", "21", "2.5", "true", '"3"'])
def test_bad_final_repeats_is_rejected(value: str) -> None:
    with pytest.raises(ConfigError, match=r"exp.toml \[grading\].final_repeats: must be"):
        config(f"final_repeats = {value}")


def test_a_typo_is_rejected_with_the_key_it_meant() -> None:
    with pytest.raises(ConfigError) as err:
        config("final_repeat = 3")
    message = str(err.value)
    assert "[grading].final_repeat: unknown key for local grading" in message
    assert "did you mean 'final_repeats'?" in message


def test_unknown_keys_and_other_backends_keys_are_rejected() -> None:
    with pytest.raises(ConfigError, match=r"\[grading\].bogus_key: unknown key"):
        config("bogus_key = 1")
    with pytest.raises(ConfigError, match=r"\[grading\].urls: .*a key of http grading"):
        config('urls = ["http://gpu-1:8765"]')
    with pytest.raises(ConfigError, match=r"\[grading\].extra: unknown key"):
        config("[grading.extra]\nx = 1")  # a nested table is a key too


def test_keys_of_the_chosen_backend_pass() -> None:
    assert config('gpus = "none"\npreview_slots = 2\nwarm_calls = true').grading_options == {
        "gpus": "none",
        "preview_slots": 2,
        "warm_calls": True,
    }
    http = config('urls = ["http://127.0.0.1:1"]\ntries = 1\ncooldown_s = 1.0', "http")
    assert http.grading_options["tries"] == 1
    sim = config("noise_cv = { p28 = 0.03, default = 0.01 }\nseed = 4", "simulated")
    assert sim.grading_options["noise_cv"] == {"p28": 0.03, "default": 0.01}


def test_nested_noise_table_is_checked() -> None:
    with pytest.raises(ConfigError, match=r"\[grading\].noise_cv.p2x: unknown key"):
        config("noise_cv = { p2x = 0.03 }", "simulated")
    with pytest.raises(ConfigError, match=r"\[grading\].noise_cv.p28: must be a coefficient"):
        config("noise_cv = { p28 = -1 }", "simulated")


def test_the_simulated_graders_hosts_are_read_and_checked() -> None:
    from engine.factory import make_backend

    keys = (
        'slots = 2\nhosts = ["h0", "h1"]\nhost_speed = { h1 = 1.1 }\nhost_noise = { h0 = 2 }\n'
        "dsl_cv = { tirx = 0.25 }\noutlier_rate = 0.1\noutlier_factor = 2.0\nscatter = true"
    )
    backend = make_backend(config(keys, "simulated"))
    assert (backend.hosts, backend.host_speed, backend.dsl_cv) == (
        ("h0", "h1"), {"h1": 1.1}, {"tirx": 0.25},
    )  # fmt: skip
    assert (backend.outlier_rate, backend.scatter, backend.host_of("sim1")) == (0.1, True, "h1")
    for bad, message in (
        ("hosts = [1]", "hosts: must be a list of host names"),
        ("host_speed = { h1 = 0 }", "host_speed.h1: must be a runtime factor above 0"),
        ("host_noise = 3", "host_noise: must be a table"),
        ("dsl_cv = { tirx = 1.5 }", "dsl_cv.tirx: must be a coefficient"),
        ("outlier_rate = 2", "outlier_rate: must be in"),
        ("outlier_factor = -1", "outlier_factor: must be above 0"),
        ("scatter = 1", "scatter: must be true or false"),
    ):
        with pytest.raises(ConfigError, match=re.escape(f"[grading].{bad.split(' ')[0]}")) as err:
            config(bad, "simulated")
        assert message in str(err.value)


def test_backend_key_lists_match_the_constructors() -> None:
    from engine.grading.backends.fleet import FleetBackend
    from engine.grading.backends.harbor import HarborConfig
    from engine.grading.backends.http_client import HttpBackend
    from engine.grading.backends.local import LocalBackend
    from engine.standins.simulated import SimulatedBackend

    def params(fn: object) -> set[str]:
        return {
            n
            for n, p in inspect.signature(fn).parameters.items()  # type: ignore[arg-type]
            if n != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        }

    assert set(BACKEND_KEYS["local"]) == params(LocalBackend.__init__) - {"config"}
    assert set(BACKEND_KEYS["http"]) == params(FleetBackend.__init__) | params(HttpBackend.__init__)
    assert set(BACKEND_KEYS["harbor"]) == {f.name for f in dataclasses.fields(HarborConfig)}
    assert BACKEND_KEYS["ray"] == ("ray",)  # its own table, [grading.ray], checks its keys
    assert set(BACKEND_KEYS["simulated"]) == {
        f.name for f in dataclasses.fields(SimulatedBackend) if f.init
    } - {"name"}


def test_example_configs_still_parse() -> None:
    root = Path(__file__).resolve().parents[2]
    paper = parse_config((root / "experiments/paper.toml").read_text(), check_problems=False)
    assert paper.final_repeats == 3
