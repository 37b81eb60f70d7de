"""Where the appliance finds its own files and keeps its caches.

The package carries what every install needs (built-in profiles, schemas). The project's
working files live in a checkout of the repository, found in this order:

- the engine lock: `--lock`, else $APPLIANCE_LOCK, else `engine/llama.cpp.lock.json`;
- the patch series: $APPLIANCE_PATCHES, else `patches/llama.cpp/` beside the lock's checkout;
- the findings: $APPLIANCE_EVIDENCE, else `evidence/`;
- everything else a build reads (`containers/`): below the checkout root.

The checkout root is $APPLIANCE_ROOT, else the directory above the package when the package
runs from a checkout (an editable install), else the current directory.
"""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent
LOCK_IN_CHECKOUT = Path("engine") / "llama.cpp.lock.json"
ROOT_ENV, LOCK_ENV, PATCHES_ENV, EVIDENCE_ENV = (
    "APPLIANCE_ROOT",
    "APPLIANCE_LOCK",
    "APPLIANCE_PATCHES",
    "APPLIANCE_EVIDENCE",
)


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser().resolve() if value else None


def repo_root() -> Path:
    """The project checkout: $APPLIANCE_ROOT, the checkout holding the package, or the cwd."""
    env = _env_path(ROOT_ENV)
    if env is not None:
        return env
    above = PACKAGE_DIR.parent
    return above if (above / LOCK_IN_CHECKOUT).is_file() else Path.cwd()


def default_lock_path() -> Path:
    """$APPLIANCE_LOCK, else engine/llama.cpp.lock.json in the checkout."""
    return _env_path(LOCK_ENV) or repo_root() / LOCK_IN_CHECKOUT


def patches_override() -> Path | None:
    """$APPLIANCE_PATCHES: a patches/llama.cpp directory kept outside the checkout."""
    return _env_path(PATCHES_ENV)


def default_patches_dir() -> Path:
    return patches_override() or repo_root() / "patches" / "llama.cpp"


def evidence_dir() -> Path:
    """$APPLIANCE_EVIDENCE, else evidence/ in the checkout."""
    return _env_path(EVIDENCE_ENV) or repo_root() / "evidence"


def cache_dir() -> Path:
    """$APPLIANCE_CACHE, else $XDG_CACHE_HOME/appliance, else ~/.cache/appliance."""
    env = os.environ.get("APPLIANCE_CACHE")
    if env:
        return Path(env)
    return _xdg_dir("XDG_CACHE_HOME", ".cache")


def config_dir() -> Path:
    """$XDG_CONFIG_HOME/appliance, else ~/.config/appliance: signing keys and the trust store."""
    return _xdg_dir("XDG_CONFIG_HOME", ".config")


def _xdg_dir(variable: str, fallback: str) -> Path:
    xdg = os.environ.get(variable)
    return (Path(xdg) if xdg else Path.home() / fallback) / "appliance"
