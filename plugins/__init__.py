"""The built-in plugins of privacy-arena, installed as ``arena_plugins`` and loaded through the ``arena`` entry
points."""
