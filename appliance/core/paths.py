"""Where the appliance finds its own files and keeps its caches."""

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent


def repo_root() -> Path:
    """The project checkout: APPLIANCE_ROOT, else the directory above the package."""
    env = os.environ.get("APPLIANCE_ROOT")
    return Path(env).resolve() if env else PACKAGE_DIR.parent


def default_lock_path() -> Path:
    return repo_root() / "engine" / "llama.cpp.lock.json"


def cache_dir() -> Path:
    """$APPLIANCE_CACHE, else $XDG_CACHE_HOME/appliance, else ~/.cache/appliance."""
    env = os.environ.get("APPLIANCE_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "appliance"
