"""patched_worker package."""
