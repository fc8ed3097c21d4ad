"""The recipes that ship inside the package: `--config NAME` finds one from any directory, a path still
wins, a missing one says what there is, and `aiayn recipes` lists them one line each."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from aiayn import recipes
from aiayn.config import Config, ConfigError
from inprocess import run_aiayn

ROOT = Path(__file__).resolve().parents[1]


def test_every_recipe_loads_by_name_and_says_in_one_line_what_it_trains():
    names = recipes.names()
    assert {"quickstart", "multi30k_de_en_tiny", "wmt14_en_de_base", "craft_parse"} <= set(names)
    for name in names:
        text = recipes.path(name).read_text(encoding="utf-8")
        first = text.partition("\n")[0]
        assert first.startswith("# ") and 20 <= len(first) <= 120, (name, first)
        assert recipes.summary(name) == first[2:]
        assert Config.load(name).to_dict() == Config.load(name + ".yaml").to_dict()
        assert "configs/" not in text, name  # a recipe's usage lines name recipes, which work from a wheel
    # a checkout's configs/ is the packaged directory under its old name, so old paths keep working
    if (ROOT / "configs").exists():
        assert (ROOT / "configs").resolve() == recipes.HERE
        assert Config.load(str(ROOT / "configs" / "quickstart.yaml")).to_dict() == Config.load("quickstart").to_dict()


def test_a_path_wins_over_a_recipe_and_a_missing_config_says_what_there_is(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an empty directory, far from any checkout
    mine = yaml.safe_load(recipes.path("quickstart").read_text())
    mine["model"]["d_model"] = 64
    Path("quickstart.yaml").write_text(yaml.safe_dump(mine))
    assert Config.load("quickstart.yaml").model["d_model"] == 64  # the file given
    assert Config.load("quickstart").model["d_model"] == 128  # no file of that name: the recipe
    with pytest.raises(ConfigError, match=r"configs/multi30k_de_en\.yaml; the recipe 'multi30k_de_en' ships in"):
        Config.load("configs/multi30k_de_en.yaml")
    with pytest.raises(ConfigError, match="no packaged recipe is named 'nope'"):
        Config.load("nope")
    with pytest.raises(ConfigError, match="no recipe named '../quickstart'"):
        recipes.path("../quickstart")


def test_aiayn_recipes_and_train_by_name_from_an_empty_directory(home, tmp_path):
    work = tmp_path / "empty"
    work.mkdir()

    def aiayn(*args: str) -> subprocess.CompletedProcess:  # in this process, from the empty directory
        p = run_aiayn(*args, cwd=work, text=True)
        assert p.returncode == 0, p.stderr[-2000:]
        return p

    lines = aiayn("recipes").stdout.splitlines()
    assert [x.split()[0] for x in lines] == recipes.names()
    assert all(x.split(None, 1)[1] == recipes.summary(x.split()[0]) for x in lines)
    assert aiayn("recipes", "multi30k_de_en_tiny").stdout == recipes.path("multi30k_de_en_tiny").read_text()
    embedded = ["--data.corpus", "embedded", "--data.src_lang", "digits", "--data.tgt_lang", "en"]
    aiayn(
        *("train", "--config", "multi30k_de_en_tiny", "--run-dir", "run", *embedded, "--data.vocab_size", "300"),
        *("--data.embedded_size", "400", "--train.max_steps", "2", "--train.eval_every", "0"),
    )
    run = yaml.safe_load((work / "run" / "config.yaml").read_text())
    recipe = Config.load("multi30k_de_en_tiny").model
    assert {k: run["model"][k] for k in recipe} == recipe and run["train"]["max_steps"] == 2
    assert [p.name for p in work.iterdir()] == ["run"]
