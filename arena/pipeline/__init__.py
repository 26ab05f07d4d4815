"""The run: scenario files planned into matchups, matchups played (in the attack sandbox, serially or on Ray), rows
stored in the run directory."""
