"""The Hugging Face hub: what looks like a repo id, and downloads with one-line errors.

huggingface-hub does the downloading (with its progress bars); this adds only
the repo-id test that tells a hub name from a local path, and messages a user
can act on for each way a download fails.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import SpecmlxError, first_line

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def is_repo_id(source: str) -> bool:
    """`owner/name`, and not a GGUF file's path."""
    return bool(REPO_ID.fullmatch(source)) and not source.endswith(".gguf")


def download(repo_id: str, revision: str | None = None) -> Path:
    """A local snapshot of an MLX model repo: config, tokenizer and safetensors files."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS  # mlx-lm imports transformers: only when needed

    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=DEFAULT_ALLOW_PATTERNS))
    except (OfflineModeIsEnabled, LocalEntryNotFoundError):
        raise SpecmlxError(
            f"cannot download {repo_id!r}: the hub is unreachable or offline mode is on (HF_HUB_OFFLINE), "
            "and it is not in the local cache"
        ) from None
    except (RepositoryNotFoundError, GatedRepoError, RevisionNotFoundError, HFValidationError) as err:
        raise SpecmlxError(f"cannot download {repo_id!r}: {first_line(err)}") from None
    except OSError as err:  # network failures and a full disk surface as OSErrors
        raise SpecmlxError(f"cannot download {repo_id!r}: {first_line(err)}") from None
