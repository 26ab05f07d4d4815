"""The ``arena`` command's subcommands, one module per group (``arena.cli`` parses and dispatches)."""
