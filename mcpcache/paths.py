"""Moved to `mcpcache.stores.opening` (opening stores is the stores' business); kept for one version."""

from mcpcache.stores.opening import cache_dir, default_path, default_store

__all__ = ["cache_dir", "default_path", "default_store"]
