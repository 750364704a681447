"""Trainer config: YAML plus dotted overrides; errors name the file, the field and the fix."""


import pytest
import yaml

from trainer.config import PRESETS, load_config, parse_overrides
from trainer.errors import ConfigError

FIXTURES = PRESETS


@pytest.mark.parametrize(("name", "algorithm"), [("grpo_tiny.yaml", "grpo"),
                                               ("ppo_tiny.yaml", "ppo")])
def test_fixtures_load_with_the_top_level_keys(name, algorithm):
    cfg = load_config(FIXTURES / name)
    # the values each preset writes (trainer/presets/*.yaml), not the fields' defaults: run_dir
    # differs from its default, and the rest must be what the file says
    top = ("run_dir", "total_steps", "save_freq", "seed", "resume")
    assert tuple(getattr(cfg, key) for key in top) == (
        f"runs/{name.removesuffix('.yaml')}", 20, 10, 1, "auto")
    assert cfg.algorithm == algorithm
    raw = yaml.safe_load((FIXTURES / name).read_text())
    assert {key: getattr(cfg, key) for key in top} == {key: raw[key] for key in top}


def test_dotted_overrides_parse_as_yaml_scalars():
    assert parse_overrides(["a.b=1", "c=x", "d=true", "e=[1, 2]"]) == {
        "a": {"b": 1}, "c": "x", "d": True, "e": [1, 2]}
    cfg = load_config(FIXTURES / "grpo_tiny.yaml", ["total_steps=3", "actor.lr=0.5"])
    assert cfg.total_steps == 3 and cfg.actor.lr == 0.5 and cfg.actor.zero_stage == 2


def test_unknown_key_names_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("actor: {zero_stag: 2}\n")
    with pytest.raises(ConfigError) as e:
        load_config(bad)
    assert str(bad) in str(e.value) and "actor.zero_stag" in str(e.value)
    assert "unknown key" in str(e.value)


def test_out_of_range_value_names_the_override():
    with pytest.raises(ConfigError) as e:
        load_config(FIXTURES / "grpo_tiny.yaml", ["actor.zero_stage=5"])
    assert "overrides actor.zero_stage" in str(e.value) and "`actor.zero_stage`" in str(e.value)
    assert "got 5" in str(e.value)


@pytest.mark.parametrize("text", ["- a\n- b\n", "a: [unclosed\n"])
def test_malformed_yaml_is_a_config_error(tmp_path, text):
    p = tmp_path / "x.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError, match="x.yaml"):
        load_config(p)


def test_missing_file_and_bad_override():
    with pytest.raises(ConfigError, match="no such config file"):
        load_config("nope.yaml")
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["total_steps"])
