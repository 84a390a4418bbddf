"""Tests written to kill surviving mutants (scripts/mutation.sh, docs/testing.md)."""
