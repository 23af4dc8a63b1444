"""One prompt's runs: every mode, drafter, temperature and draft length, in order."""

from __future__ import annotations

from specmlx.bench.lineup import Entrant
from specmlx.policy import DraftPolicy
from specmlx.bench.plan import MLX_LM_SPEC, SPECMLX, TARGET, RunSpec, plan_runs
from specmlx.drafters import ModelDrafter, NoDrafter, PromptLookupDrafter


def entrants(target, vocab):
    return [Entrant("small", "/m/small", ModelDrafter(target, vocab, name="small")),
            Entrant("ngram", "ngram", PromptLookupDrafter()), Entrant("none", "none", NoDrafter())]


def test_every_combination_once_target_first_per_temperature(target, vocab):
    plan = plan_runs(entrants(target, vocab), temps=[0.0, 0.7], num_drafts=[1, 4])
    per_temp = [
        RunSpec(TARGET, "", None, 0),
        RunSpec(MLX_LM_SPEC, "small", None, 1), RunSpec(SPECMLX, "small", None, 1),
        RunSpec(MLX_LM_SPEC, "small", None, 4), RunSpec(SPECMLX, "small", None, 4),
        RunSpec(SPECMLX, "ngram", None, 1), RunSpec(SPECMLX, "ngram", None, 4),
        RunSpec(SPECMLX, "none", None, 0),  # drafts nothing: once, not per k
    ]
    expected = [RunSpec(r.mode, r.drafter, t, r.num_draft) for t in (0.0, 0.7) for r in per_temp]
    assert plan == expected
    assert len(set(plan)) == len(plan)


def test_mlx_lm_runs_only_for_model_drafters(target, vocab):
    model, ngram, none = entrants(target, vocab)
    assert model.model is target and ngram.model is None and none.model is None
    plan = plan_runs([ngram], temps=[0.0], num_drafts=[2])
    assert [r.mode for r in plan] == [TARGET, SPECMLX]


def test_labels_name_the_run():
    assert RunSpec(TARGET, "", 0.7, 0).label == "target t=0.7"
    assert RunSpec(SPECMLX, "ngram", 0.0, 4).label == "specmlx ngram t=0 k=4"


def test_modes_filter_the_plan(target, vocab):
    plan = plan_runs(entrants(target, vocab), temps=[0.7], num_drafts=[4], modes=[MLX_LM_SPEC, SPECMLX])
    assert [(r.mode, r.drafter) for r in plan] == [
        (MLX_LM_SPEC, "small"), (SPECMLX, "small"), (SPECMLX, "ngram"), (SPECMLX, "none")]
    assert plan_runs(entrants(target, vocab)[1:], temps=[0.0], num_drafts=[4], modes=[MLX_LM_SPEC]) == []


def test_variable_length_variants_have_no_mlx_lm_twin(target, vocab):
    drafter = ModelDrafter(target, vocab, name="small")
    plan = plan_runs([Entrant("small+pmin=0.5", "/m/small+pmin=0.5", drafter, DraftPolicy(p_min=0.5))],
                     temps=[0.0], num_drafts=[6])
    assert [r.mode for r in plan] == [TARGET, SPECMLX]


def test_a_prediction_variant_has_no_mlx_lm_run(target, vocab):
    """mlx-lm has no predicted outputs: its run of the same model would use none, and be no baseline."""
    predicted = Entrant("small+prediction", "/m/small+prediction", ModelDrafter(target, vocab, name="small"),
                        predicted=True)
    assert [r.mode for r in plan_runs([predicted], temps=[0.0], num_drafts=[2])] == [TARGET, SPECMLX]
