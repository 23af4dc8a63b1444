"""The app's folder is app/ and its installed name specmlx_chat (pyproject's
package-dir): both must work, and the package list must name every folder.
The wheel itself is built and installed by tests/test_package.py (slow)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = "specmlx_chat"


def setuptools_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_every_package_folder_is_listed_and_the_app_installs_under_its_own_name():
    config = setuptools_config()
    assert config["package-dir"] == {INSTALLED: "app"}
    assert config["package-data"][INSTALLED] == ["*.tcss"] and (ROOT / "app" / "app.tcss").is_file()
    folders = {p.parent.relative_to(ROOT).as_posix() for top in ("specmlx", "app")
               for p in (ROOT / top).rglob("__init__.py") if "__pycache__" not in p.parts}
    expected = {f"{INSTALLED}{folder[3:]}" if folder.split("/")[0] == "app" else folder for folder in folders}
    assert set(config["packages"]) == {name.replace("/", ".") for name in expected}
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts["specmlx-chat"] == f"{INSTALLED}.__main__:main"


IMPORT_ALL = """
import importlib, pkgutil, sys
import {name}
modules = [m.name for m in pkgutil.walk_packages({name}.__path__, "{name}.")]
for module in modules:
    importlib.import_module(module)
print(len(modules), sorted(m for m in sys.modules if m.split(".")[0] == "app"))
"""


def test_the_app_imports_itself_under_its_installed_name(tmp_path):
    """Every module, imported as specmlx_chat.*, never reaches for a module called `app`."""
    (tmp_path / INSTALLED).symlink_to(ROOT / "app", target_is_directory=True)
    result = subprocess.run([sys.executable, "-c", IMPORT_ALL.format(name=INSTALLED)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    count, reached = result.stdout.split(" ", 1)
    assert int(count) >= 20 and reached.strip() == "[]"


def test_python_m_app_works_from_a_checkout():
    result = subprocess.run([sys.executable, "-m", "app", "--help"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: specmlx-chat")
