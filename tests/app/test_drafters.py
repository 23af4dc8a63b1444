"""The drafters a chat offers: by name, model drafters first, each loaded once, on first use."""

import pytest

from app.drafters import DrafterSet
from specmlx.drafters import NoDrafter, PromptLookupDrafter, SuffixDrafter
from specmlx.errors import SpecmlxError

from .fakes import FakeDrafter


def test_every_drafter_is_offered_and_the_later_ones_load_on_first_use_once():
    loads = []

    def load_mtp():
        loads.append("mtp")
        return FakeDrafter("mtp")

    drafters = DrafterSet(FakeDrafter("qwen-0.5b"), {"mtp": load_mtp})
    assert drafters.names == ("qwen-0.5b", "mtp", "ngram", "none") and drafters.default == "qwen-0.5b"
    assert not loads and not drafters.is_loaded("mtp")  # nothing loads until it is chosen
    mtp = drafters.drafter("mtp")
    assert drafters.drafter("mtp") is mtp and loads == ["mtp"] and drafters.is_loaded("mtp")
    assert isinstance(drafters.drafter("ngram"), PromptLookupDrafter)
    assert isinstance(drafters.drafter("none"), NoDrafter)


def test_the_drafter_already_loaded_is_not_loaded_again():
    drafters = DrafterSet(FakeDrafter("mtp"), {"qwen-0.5b": FakeDrafter, "mtp": pytest.fail})
    assert drafters.names == ("mtp", "qwen-0.5b", "ngram", "none")
    drafters.drafter("mtp")


def test_a_failed_load_says_why_and_is_tried_again():
    attempts = []

    def not_fetched():
        attempts.append(1)
        raise SpecmlxError("preset p is not fetched yet; run: specmlx models fetch p")

    drafters = DrafterSet(PromptLookupDrafter(), {"mtp": not_fetched})
    assert drafters.names == ("mtp", "ngram", "none") and drafters.default == "ngram"
    for _ in range(2):
        with pytest.raises(SpecmlxError, match="specmlx models fetch p"):
            drafters.drafter("mtp")
    assert len(attempts) == 2
    with pytest.raises(SpecmlxError, match=r"no drafter 'gpt' with these models; choose one of mtp, ngram, none"):
        drafters.drafter("gpt")


def test_suffix_lookup_is_offered_when_loaded_with_it():
    loaded = SuffixDrafter()
    drafters = DrafterSet(loaded, {"mtp": FakeDrafter})
    assert drafters.names == ("mtp", "ngram", "suffix", "none") and drafters.default == "suffix"
    assert drafters.drafter("suffix") is loaded
    assert DrafterSet(FakeDrafter("mtp")).names == ("mtp", "ngram", "none")  # not otherwise
