"""Which drafters a bench loads, and loading them next to the target."""

from __future__ import annotations

import inspect
import re

import pytest

from specmlx.bench.lineup import PREDICTION, SCHEMA, drafter_specs, has_word, load_lineup, pins_length, split_variant
from specmlx.policy import START_DRAFT, DraftPolicy
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter
from specmlx.errors import SpecmlxError


def test_a_path_target_defaults_to_prompt_lookup(model_dirs):
    assert drafter_specs(str(model_dirs["target"]), []) == ["ngram", "ngram+auto"]


def test_a_preset_brings_its_drafter_and_ngram(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECMLX_MODELS", str(tmp_path))
    drafter = tmp_path / "qwen2.5-coder-1.5b" / "qwen2.5-coder-0.5b"
    drafter.mkdir(parents=True)
    (drafter / "config.json").write_text("{}")
    assert drafter_specs("qwen2.5-coder-1.5b", []) == [str(drafter), f"{drafter}+auto", "ngram", "ngram+auto"]
    assert drafter_specs("gemma-3-270m", []) == ["ngram", "ngram+auto"]  # its preset drafter is ngram


def test_comma_separated_repeated_and_deduplicated():
    assert drafter_specs("x", ["ngram, none", "ngram", "/m/d"]) == ["ngram", "none", "/m/d"]


def test_load_every_kind_once(model_dirs):
    lineup = load_lineup(str(model_dirs["target"]), [str(model_dirs["drafter"]), "ngram", "none"])
    names = [e.name for e in lineup.entrants]
    assert names == ["drafter", "ngram", "none"]
    model, ngram, none = lineup.entrants
    assert isinstance(model.drafter, ModelDrafter) and model.model is model.drafter.model
    assert isinstance(ngram.drafter, PromptLookupDrafter) and ngram.model is None and ngram.drafts
    assert isinstance(none.drafter, NoDrafter) and not none.drafts


def test_a_sharded_lineup_loads_with_the_default_sharding(model_dirs):
    """Without `sharding`, a sharded lineup takes the sharding the target supports, as `--sharding auto`
    does; the `+auto` drafter suffix is another thing and still chooses the draft length."""
    import mlx.core as mx

    from specmlx.distributed import Group
    from specmlx.distributed.load import AUTO, Ranks

    assert inspect.signature(Ranks).parameters["sharding"].default == AUTO
    one = mx.distributed.init()  # no launcher: a group of this process alone, enough for the sharded path
    lineup = load_lineup(str(model_dirs["target"]), [str(model_dirs["drafter"]), "ngram+auto"],
                         placement=Ranks(Group(one, one.rank(), one.size())))
    assert [e.name for e in lineup.entrants] == ["drafter", "ngram+auto"]
    assert lineup.entrants[1].policy.auto and not lineup.entrants[0].policy.auto
    assert lineup.lockstep is not None


def test_a_missing_drafter_fails_before_loading(model_dirs, tmp_path):
    with pytest.raises(SpecmlxError, match="no such model directory"):
        load_lineup(str(model_dirs["target"]), ["ngram", str(tmp_path / "missing")])


def test_an_adaptive_entrant_shares_its_drafter_and_has_no_mlx_lm_run(model_dirs):
    from specmlx.bench.plan import MLX_LM_SPEC, plan_runs

    drafter = str(model_dirs["drafter"])
    assert drafter_specs(str(model_dirs["target"]), [f"{drafter},{drafter}+adaptive"]) == [drafter, drafter + "+adaptive"]
    lineup = load_lineup(str(model_dirs["target"]), [drafter, drafter + "+adaptive"])
    fixed, adaptive = lineup.entrants
    assert (fixed.name, adaptive.name) == ("drafter", "drafter+adaptive")
    assert adaptive.policy.adaptive and not fixed.policy.adaptive and adaptive.drafter is fixed.drafter
    runs = plan_runs(lineup.entrants, [0.0], [4])
    assert [r.drafter for r in runs if r.mode == MLX_LM_SPEC] == ["drafter"]


def policy(**fields) -> DraftPolicy:
    return DraftPolicy(**{"num_draft": START_DRAFT, **fields})


def test_suffixes_make_variants():
    assert split_variant("/m/d") == ("/m/d", "", policy())
    assert split_variant("/m/d+pmin=0.6") == ("/m/d", "+pmin=0.6", policy(p_min=0.6))
    assert split_variant("mtp+pmin=0.3+adaptive") == ("mtp", "+pmin=0.3+adaptive", policy(adaptive=True, p_min=0.3))
    assert split_variant("d+lookup=3+pmin=0.5") == ("d", "+lookup=3+pmin=0.5", policy(p_min=0.5, lookup=3))
    assert split_variant("mtp+auto") == ("mtp", "+auto", DraftPolicy(num_draft=None))
    assert split_variant("ngram+auto+lookup=2") == ("ngram", "+auto+lookup=2", DraftPolicy(num_draft=None, lookup=2))
    assert split_variant("d+k=6") == ("d", "+k=6", policy(num_draft=6))
    fixed = [split_variant(s)[2].fixed_length
             for s in ("d", "d+adaptive", "d+pmin=0.5", "d+lookup=2", "d+auto", "d+k=2")]
    assert fixed == [True, False, False, False, False, True]


@pytest.mark.parametrize("spec, message", [("d+pmin=high", "pmin=high: pmin takes a number"),
                                           ("d+pmin=1", "draft p-min must be in [0, 1), got 1.0"),
                                           ("d+lookup=x", "lookup=x: lookup takes a whole number"),
                                           ("d+lookup=9", "lookup match length must be in 0..8"),
                                           ("d+k=four", "k=four: k takes a whole number"),
                                           ("d+pmni=0.5", "unknown part pmni=0.5"),
                                           ("d+", "an empty part"),
                                           ("d+auto+k=3", "auto and k=3 both set the draft length: choose one"),
                                           ("d+adaptive+auto", "auto and adaptive both set the draft length")])
def test_a_bad_variant_is_one_line_in_the_draft_policys_words(spec, message):
    with pytest.raises(SpecmlxError, match=re.escape(f'draft policy "{spec[2:]}": ') + ".*" + re.escape(message)):
        split_variant(spec)


def test_the_suffix_starts_in_the_last_path_component_and_a_length_pins():
    assert split_variant("/m/a+b/d+6") == ("/m/a+b/d", "+6", policy(num_draft=6))
    assert [pins_length(s) for s in ("", "+6", "+k=2+pmin=0.5", "+auto", "+adaptive")] == [
        False, True, True, False, False]


def test_a_p_min_entrant_shares_its_drafter(model_dirs):
    drafter = str(model_dirs["drafter"])
    lineup = load_lineup(str(model_dirs["target"]), [drafter, drafter + "+pmin=0.5"])
    fixed, confident = lineup.entrants
    assert confident.name == "drafter+pmin=0.5" and confident.policy == policy(p_min=0.5)
    assert confident.drafter is fixed.drafter


def test_auto_and_pinned_entrants_run_once_a_temperature_and_without_mlx_lm(model_dirs):
    """The issue's lineup: mlx-lm at --num-draft only, the model also at pinned lengths,
    automatic lengths and `none` once a temperature."""
    from specmlx.bench.plan import MLX_LM_SPEC, SPECMLX, plan_runs

    drafter = str(model_dirs["drafter"])
    specs = [drafter, drafter + "+k=2", drafter + "+auto", "ngram", "ngram+auto", "none"]
    lineup = load_lineup(str(model_dirs["target"]), specs)
    runs = plan_runs(lineup.entrants, [0.0, 0.7], [4])
    at_zero = [(r.mode, r.drafter, r.num_draft) for r in runs if r.temp == 0.0]
    assert at_zero == [("target", "", 0), (MLX_LM_SPEC, "drafter", 4), (SPECMLX, "drafter", 4),
                       (SPECMLX, "drafter+k=2", 2), (SPECMLX, "drafter+auto", None), (SPECMLX, "ngram", 4),
                       (SPECMLX, "ngram+auto", None), (SPECMLX, "none", 0)]
    assert len(runs) == 2 * len(at_zero)
    assert [r.label for r in runs if r.drafter == "drafter+auto"] == ["specmlx drafter+auto t=0 k=auto",
                                                                        "specmlx drafter+auto t=0.7 k=auto"]


def test_a_prediction_variant_copies_each_prompts_prediction_first(model_dirs):
    assert split_variant("d+prediction") == ("d", "+prediction", policy())
    assert split_variant("d+auto+prediction") == ("d", "+auto+prediction", DraftPolicy(num_draft=None))
    assert [has_word(s, PREDICTION) for s in ("", "+prediction", "+k=2+Prediction", "+auto", "+schema")] == [
        False, True, True, False, False]
    assert [has_word(s, SCHEMA) for s in ("+schema", "+prediction+Schema", "+prediction")] == [True, True, False]
    assert pins_length("+k=2+prediction") and not pins_length("+prediction")
    lineup = load_lineup(str(model_dirs["target"]), [str(model_dirs["drafter"]), f"{model_dirs['drafter']}+prediction"])
    plain, predicted = lineup.entrants
    assert (plain.predicted, predicted.predicted) == (False, True)
    assert predicted.drafter is plain.drafter and predicted.name == "drafter+prediction"
