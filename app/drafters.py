"""The drafters a chat offers: the one loaded with the target, the others of
its preset (each loaded the first time it is chosen), prompt lookup and none (and suffix lookup when
loaded with it).

No Textual here; `drafter()` may load a model, so it runs on the MLX thread.
"""

from __future__ import annotations

from typing import Callable, Mapping

from specmlx.drafters import BUILTIN, NGRAM, NONE, SUFFIX, Drafter, NoDrafter, PromptLookupDrafter
from specmlx.errors import SpecmlxError

Loader = Callable[[], Drafter]  # loads one drafter; raises SpecmlxError saying why not


class DrafterSet:
    """Drafters by name (`Drafter.name`), model drafters first."""

    def __init__(self, loaded: Drafter, later: Mapping[str, Loader] | None = None) -> None:
        self.default = loaded.name  # what the models were loaded with
        self._loaded: dict[str, Drafter] = {loaded.name: loaded}
        for builtin in (PromptLookupDrafter(), NoDrafter()):
            self._loaded.setdefault(builtin.name, builtin)
        self._later = {name: load for name, load in (later or {}).items() if name not in self._loaded}
        models = [name for name in (loaded.name, *self._later) if name not in BUILTIN]
        self.names: tuple[str, ...] = (*models, NGRAM, *[SUFFIX][: SUFFIX in self._loaded], NONE)

    def is_loaded(self, name: str) -> bool:
        return name in self._loaded

    def drafter(self, name: str) -> Drafter:
        """The drafter called `name`, loaded now if this is its first use. A load
        that fails is tried again next time (the user may fetch it meanwhile)."""
        if name not in self.names:
            raise SpecmlxError(f"no drafter {name!r} with these models; choose one of {', '.join(self.names)}")
        if name not in self._loaded:
            self._loaded[name] = self._later[name]()
            del self._later[name]
        return self._loaded[name]
